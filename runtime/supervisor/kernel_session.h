// The sandbox's Python kernel, from the supervisor's side (docs/semantics.md, "Cells").
//
// One kernel process per sandbox (kernel/nsbox_kernel.cc), started through init with the
// sandbox, talking frames on its fd 3; its stdout and stderr are pipes read here and
// attributed to the running cell. Cells queue and run one at a time, in order. Each has a
// deadline: at the deadline the kernel gets SIGINT (a KeyboardInterrupt in the cell, its
// variables kept); if the cell has not ended after the grace period, the kernel and its
// processes are killed and a fresh kernel started, and the result says state_lost. A
// kernel that dies (OOM, crash, os._exit) is restarted the same way. The next cell never
// queues behind a dead one.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "isolation/sys/unique_fd.h"
#include "mounts/files_volume.h"
#include "runtime/core/command.h"
#include "runtime/protocol/frame.h"
#include "runtime/supervisor/event_loop.h"
#include "runtime/supervisor/output_capture.h"

namespace nsbox {

struct CellRequest {
  std::string code;  // bytes, as sent (the kernel decodes them)
  double timeout_s = kDefaultTimeoutS;
  size_t output_limit = OutputCapture::kDefaultInlineLimit;
  bool stream = false;  // send "started", output and progress events while the cell runs
  std::string output_dir = kOutputDir;  // where long output spills (runtime/core/command.h)

  static Result<CellRequest> from_json(const protocol::Json& j);
};

// What the kernel session needs from the supervisor that owns it.
class KernelHost {
 public:
  virtual ~KernelHost() = default;
  // Starts a process in the sandbox through init; `fds` are named ("stdout", "fd3", ...).
  virtual Result<uint64_t> spawn_in_sandbox(const std::vector<std::string>& argv,
                                            const std::vector<std::pair<std::string, int>>& fds) = 0;
  // The kernel `argv` with `fds`: forked by the server's kernel zygote where it can be
  // (docs/kernel-zygote.md), else as spawn_in_sandbox does. Its start and end are reported
  // as a spawned process's (on_started, on_exited).
  virtual Result<uint64_t> spawn_kernel(const std::vector<std::string>& argv,
                                        const std::vector<std::pair<std::string, int>>& fds) = 0;
  virtual void signal_in_sandbox(uint64_t command_id, int signal, bool whole_group) = 0;
  virtual EventLoop& loop() = 0;
  virtual uint64_t oom_kills() const = 0;
  virtual std::string oom_message() const = 0;
  virtual FilesVolume* files_volume() = 0;
  virtual void send_to_client(int client_fd, const protocol::Json& message) = 0;  // no-op if gone
  // The client has more unsent than its high-water mark: stop reading what would go to it.
  virtual bool client_backlogged(int client_fd) const = 0;
  // A helper call (run_tool, invoke_llm, ...) through the tool bridge, made during `cell`;
  // `reply` gets {"result", "error"} exactly once, maybe at once.
  virtual void tool_call(const std::string& helper, protocol::Json args, uint64_t cell,
                         std::function<void(const protocol::Json&)> reply) = 0;
  // Answers the calls of `cell` still in flight with an error; how many there were.
  virtual size_t abandon_tool_calls(uint64_t cell) = 0;
};

class KernelSession {
 public:
  static constexpr uint64_t kGraceMs = 5000;
  // Answers to the kernel wait in a buffer while its channel is full; a kernel that lets
  // more than this pile up (a cell that stopped the kernel's reader and floods requests)
  // is killed rather than block the supervisor or grow it.
  static constexpr size_t kMaxAnswerBacklog = 1u << 20;
  // Malformed or mistyped frames a kernel may send in its life before it is killed: our
  // kernel sends none, so these come from a cell writing to the channel.
  static constexpr size_t kMaxBadFrames = 64;
  // Progress events reach a client at most this often; the latest one always does.
  static constexpr uint64_t kProgressIntervalMs = 50;

  // What every kernel of the sandbox starts with (kernel/kernel_main.cc).
  struct Options {
    std::vector<std::string> preload;  // imported before the kernel is ready
    bool merge = false;                // its preloaded heap offered to KSM
    // Why no kernel can run here (an image sandbox: its Python is the image's, which
    // nsbox's pure-Python kernel will serve); every cell fails with it. Empty: none.
    std::string unavailable;
  };
  KernelSession(KernelHost& host, Options options) : host_(host), options_(std::move(options)) {}

  void start();
  void submit(int client_fd, CellRequest request);
  void interrupt();  // the running cell, if any; asked again, SIGINT again (same grace)
  void restart();    // a fresh interpreter; a running cell ends with state_lost
  // A warm pool's claim: `env` into the running kernel's os.environ and its random state
  // reseeded, before any cell sent after it. A kernel started later has both anyway.
  void configure(const EnvList& env);
  void shutdown();   // the sandbox is going: no more restarts
  void client_gone(int client_fd);
  // The client's backlog crossed its high- or low-water mark (Supervisor::flush).
  void on_client_backlog(int client_fd);
  protocol::Json status() const;

  // init's reports about the kernel's process.
  bool owns(uint64_t command_id) const { return command_id != 0 && command_id == command_id_; }
  void on_started(pid_t sandbox_pid) { sandbox_pid_ = sandbox_pid; }
  pid_t sandbox_pid() const { return sandbox_pid_; }  // 0 until init reports it
  // The seccomp filter killed the kernel's process (its result will say which call).
  void on_seccomp_kill(std::string what) { seccomp_kill_ = std::move(what); }
  void on_spawn_failed(int err);
  void on_exited(std::optional<int> exit_code, std::optional<int> signal);

 private:
  enum class State { kStopped, kStarting, kIdle, kBusy };
  struct Cell {
    uint64_t number = 0;
    int client = -1;
    CellRequest request;
    std::unique_ptr<OutputCapture> out, err;
    std::chrono::steady_clock::time_point started;
    int timer = -1;
    bool timed_out = false;
    bool interrupted = false;
    bool restarted = false;
    std::string kill_reason;  // why we killed the kernel ourselves (a protocol abuse)
    uint64_t oom_before = 0;
    protocol::Json pending_progress;  // the latest progress not yet sent (null: none)
    int progress_timer = -1;
    size_t abandoned_tool_calls = 0;  // in flight at the deadline (the tool bridge's)
  };

  void dispatch();
  void on_control_event(uint32_t events);
  void on_kernel_messages();
  void on_kernel_message(const protocol::Json& m);
  void on_progress(const protocol::Json& m);
  void on_helper_call(const protocol::Json& m);
  void send_progress();
  bool send_to_kernel(const protocol::Json& message);  // false: the channel is closed
  void answer_kernel(const protocol::Json& message);   // send_to_kernel, bounded
  void flush_to_kernel();
  size_t pending_to_kernel() const;
  void update_interest();
  void refresh_pause();
  void kill_for_abuse(const std::string& reason);
  void on_output(bool is_stdout);
  bool relay(bool is_stdout);
  void on_deadline();
  void on_grace_over();
  void kill_kernel();
  void finish(protocol::Json result);
  protocol::Json base_result(const Cell& cell) const;
  void fail_queued(const Error& e);
  void close_kernel_fds();

  KernelHost& host_;
  Options options_;
  State state_ = State::kStopped;
  bool shutting_down_ = false;
  bool restart_wanted_ = false;
  int failed_starts_ = 0;
  uint64_t command_id_ = 0;
  pid_t sandbox_pid_ = 0;
  std::string seccomp_kill_;
  UniqueFd control_, out_, err_;
  protocol::FrameReader reader_{protocol::kMaxClientFrame, protocol::kUntrustedJson};  // the sandbox writes it
  std::string to_kernel_;      // encoded frames; the channel took the first to_kernel_sent_ bytes
  size_t to_kernel_sent_ = 0;
  size_t execute_bytes_ = 0;   // of them, the cell being sent (not an answer backlog)
  size_t bad_frames_ = 0;
  bool state_lost_unseen_ = false;  // the kernel died between cells; no result said so yet
  bool reading_paused_ = false;  // the running cell's client is backlogged
  std::deque<std::unique_ptr<Cell>> queue_;
  std::unique_ptr<Cell> running_;
  uint64_t next_cell_ = 1;
  std::string stray_out_, stray_err_;  // output while no cell ran: given to the next one
};

}  // namespace nsbox
