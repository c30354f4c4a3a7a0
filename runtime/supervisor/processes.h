// Processes of a sandbox that outlive the request that started them (docs/semantics.md,
// "Processes"). Each is named by its pid inside the sandbox; its output is kept per stream
// (stdout and stderr, or the terminal's one stream with tty) and read from any offset,
// while it runs and after it ended, until it is removed or the sandbox stops. They belong
// to the supervisor, not to a client: a client's (or the server's) disconnect or restart
// leaves them running.
//
//   proc_start  {argv, env, cwd, run_as, tty, cols, rows} -> {pid}   (once init started it)
//   proc_list   {}                                -> {processes: [...]}
//   proc_read   {pid, offset, stderr_offset, wait_ms, max_bytes}
//               -> {status, exit_code, signal, stdout: {offset, data|data_b64, skipped},
//                   stderr: {...}, stdout_end, stderr_end}: at once when there are bytes
//                   past an offset or the process ended, else when some come or wait_ms passed
//   proc_write  {pid, data|data_b64, eof}        -> {accepted}        (stdin, or the terminal)
//   proc_signal {pid, signal}                    -> {}                (its process group)
//   proc_resize {pid, cols, rows}                -> {}                (a tty's window)
//   proc_remove {pid}                            -> {removed}         (SIGKILL to its group)
//
// A PTY session (docs/semantics.md, "PTY sessions") is such a process with a terminal, read
// in windows of time from where its last answer ended (process_pty.cc):
//
//   pty_start  {argv, cols, rows, env, cwd, run_as} -> {session_id}  (its pid)
//   pty_write  {session_id, chars|chars_b64, yield_ms} -> {output, exit_code} after the window
//   pty_read   {session_id, yield_ms, early} -> the same, without writing; with `early`,
//                                              as soon as there is output (interactive use)
//   (pty_write with "take_output": false answers at once and leaves the output for a read)
//   pty_resize {session_id, cols, rows}
//   pty_kill   {session_id} | {all: true}
//
// A session is gone once its command's exit was read; at the limit, a new one prunes the
// least recently used session beyond the kKeepNewestSessions newest. An answer holds at
// most kMaxWindowBytes (the newest; the next answer says how many were dropped).
//
// Bounded: kMaxProcesses per sandbox, sessions included (ended ones count until removed:
// their status is kept), kMaxPendingInput bytes of input not yet taken, each stream a
// StreamLog.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"
#include "mounts/files_volume.h"
#include "runtime/core/command.h"
#include "runtime/protocol/frame.h"
#include "runtime/supervisor/event_loop.h"
#include "runtime/supervisor/stream_log.h"
#include "runtime/supervisor/terminal.h"

namespace nsbox {

// A command to start in the sandbox: on top of the sandbox's environment, in `cwd` ("":
// the workspace root), as the account `run_as` ("": user).
struct Launch {
  std::vector<std::string> argv;
  EnvList env;
  std::string cwd;
  std::string run_as;
};

class ProcessHost {
 public:
  virtual ~ProcessHost() = default;
  // The master of a new terminal in the sandbox's own devpts instance.
  virtual Result<UniqueFd> open_pty_master() = 0;
  // Starts the command with `slave` as its controlling terminal and stdio.
  virtual Result<uint64_t> spawn_on_tty(const Launch& launch, int slave) = 0;
  // Starts the command with the given stdio (pipe ends).
  virtual Result<uint64_t> spawn_with_stdio(const Launch& launch, int in, int out, int err) = 0;
  virtual void signal_in_sandbox(uint64_t command_id, int signal, bool whole_group) = 0;
  virtual EventLoop& loop() = 0;
  virtual void send_to_client(int client_fd, const protocol::Json& message) = 0;  // no-op if gone
  virtual FilesVolume* files_volume() = 0;  // null when the sandbox has none
  // Where a command that names no working directory starts: the workspace root.
  virtual std::string working_dir(const std::string& asked) const = 0;
  // Whether `run_as` names one of the sandbox's accounts ("" is user); the error lists them.
  virtual Result<void> check_account(const std::string& run_as) const = 0;
};

class Processes {
 public:
  static constexpr size_t kMaxProcesses = 64;
  static constexpr size_t kMaxPendingInput = 1 << 20;
  static constexpr size_t kMaxReadBytes = 256 << 10;  // per stream per answer
  static constexpr uint64_t kMaxWaitMs = 30000;
  static constexpr size_t kMaxWaiters = 16;  // per process; more read at once
  static constexpr size_t kKeepNewestSessions = 8;
  static constexpr size_t kMaxWindowBytes = 1 << 20;
  static constexpr uint64_t kMaxYieldMs = 30000;

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
  // A PTY session's answer waiting for its window to end (or, `early`, for output).
  struct WindowWaiter {
    int client_fd;
    int timer;
    bool early;
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
    // A PTY session's: its answers start where the last one ended.
    bool session = false;
    uint64_t seen = 0;
    std::chrono::steady_clock::time_point last_used;
    std::vector<WindowWaiter> windows;
  };

  void start(int client_fd, const protocol::Json& request, bool session);
  Result<void> open_stdio(Process& p, const protocol::Json& request);
  void list(int client_fd);
  void read(int client_fd, const protocol::Json& request);
  void write(int client_fd, const protocol::Json& request);
  void signal(int client_fd, const protocol::Json& request);
  void remove(int client_fd, const protocol::Json& request);
  void resize(int client_fd, const protocol::Json& request, bool session);
  Result<Process*> find(const protocol::Json& request);
  // process_pty.cc: PTY sessions.
  void handle_pty(int client_fd, const std::string& op, const protocol::Json& request);
  Result<Process*> find_session(const protocol::Json& request);
  void exchange(int client_fd, const protocol::Json& request, bool writes);
  void send_window(Process& p, int client_fd);
  void answer_window(Process& p, int client_fd);
  void answer_windows(Process& p, bool all);
  void end_if_read(uint64_t command);
  void kill_sessions(int client_fd, const protocol::Json& request);
  bool prune_session();
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
