// Processes of a sandbox that outlive the request that started them (docs/semantics.md,
// "Processes"). Each is named by its pid inside the sandbox; its output is kept per stream
// (stdout and stderr, or the terminal's one stream with tty) and read from any offset,
// while it runs and after it ended, until it is removed or the sandbox stops. They belong
// to the supervisor, not to a client: a client's (or the server's) disconnect or restart
// leaves them running.
//
//   proc_start  {argv, env, cwd, tty, cols, rows} -> {pid}            (once init started it)
//   proc_list   {}                                -> {processes: [...]}
//   proc_read   {pid, offset, stderr_offset, wait_ms, max_bytes}
//               -> {status, exit_code, signal, stdout: {offset, data|data_b64, skipped},
//                   stderr: {...}, stdout_end, stderr_end}: at once when there are bytes
//                   past an offset or the process ended, else when some come or wait_ms passed
//   proc_write  {pid, data|data_b64, eof}        -> {accepted}        (stdin, or the terminal)
//   proc_signal {pid, signal}                    -> {}                (its process group)
//   proc_remove {pid}                            -> {removed}         (SIGKILL to its group)
//
// Bounded: kMaxProcesses per sandbox (ended ones count until removed: their status is
// kept), kMaxPendingInput bytes of input not yet taken, each stream a StreamLog.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mounts/files_volume.h"
#include "runtime/supervisor/pty_sessions.h"
#include "runtime/supervisor/stream_log.h"

namespace nsbox {

class ProcessHost : public PtyHost {
 public:
  // Starts the command with the given stdio (pipe ends).
  virtual Result<uint64_t> spawn_with_stdio(const Launch& launch, int in, int out, int err) = 0;
  virtual FilesVolume* files_volume() = 0;  // null when the sandbox has none
  // Where a command that names no working directory starts: the workspace root.
  virtual std::string working_dir(const std::string& asked) const = 0;
};

class Processes {
 public:
  static constexpr size_t kMaxProcesses = 64;
  static constexpr size_t kMaxPendingInput = 1 << 20;
  static constexpr size_t kMaxReadBytes = 256 << 10;  // per stream per answer
  static constexpr uint64_t kMaxWaitMs = 30000;
  static constexpr size_t kMaxWaiters = 16;  // per process; more read at once

  explicit Processes(ProcessHost& host) : host_(host) {}
  ~Processes() { kill_all(); }

  void handle(int client_fd, const std::string& op, const protocol::Json& request);
  bool on_init_message(uint64_t command_id, const protocol::Json& message);  // true if ours
  void client_gone(int client_fd);
  void kill_all();

 private:
  struct Waiter {
    int client_fd;
    int timer;
    uint64_t offset, stderr_offset;
    size_t max;
  };
  struct Process {
    uint64_t command = 0;
    pid_t pid = 0;  // 0 until init reports it
    bool tty = false;
    std::vector<std::string> argv;
    std::string cwd, run_as, started_at;
    UniqueFd master;                  // tty: the terminal (input and output)
    UniqueFd stdin_w, out_r, err_r;   // otherwise: pipes
    std::string input;                // not yet taken by the process
    bool close_stdin = false;         // once `input` is taken
    std::unique_ptr<StreamLog> out, err;
    std::optional<int> exit_code, signal;
    int starter = -1;                 // the client waiting for the pid
    std::vector<Waiter> waiters;
  };

  void start(int client_fd, const protocol::Json& request);
  Result<void> open_stdio(Process& p, const protocol::Json& request);
  void list(int client_fd);
  void read(int client_fd, const protocol::Json& request);
  void write(int client_fd, const protocol::Json& request);
  void signal(int client_fd, const protocol::Json& request);
  void remove(int client_fd, const protocol::Json& request);
  Result<Process*> find(const protocol::Json& request);
  void on_readable(uint64_t command, bool is_stdout);
  void take_output(Process& p, int rounds);
  Result<void> feed(Process& p);
  bool has_news(const Process& p, uint64_t offset, uint64_t stderr_offset) const;
  void answer(Process& p, int client_fd, uint64_t offset, uint64_t stderr_offset, size_t max);
  void answer_waiters(Process& p, bool all);
  void forget(uint64_t command);
  void error(int client_fd, const Error& e);
  protocol::Json status(const Process& p) const;

  ProcessHost& host_;
  std::map<uint64_t, Process> processes_;  // by init's command id
};

}  // namespace nsbox
