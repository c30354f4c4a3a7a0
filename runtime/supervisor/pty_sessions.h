// PTY sessions of a sandbox (docs/semantics.md, "PTY sessions"): a command on a terminal
// of the sandbox's own devpts, which an agent writes keystrokes to and reads the screen
// output of, in windows of time. The supervisor owns one PtySessions.
//
//   pty_start  {argv, cols, rows, env, cwd, run_as} -> {session_id}
//   pty_write  {session_id, chars|chars_b64, yield_ms} -> {output, exit_code} after the window
//   pty_read   {session_id, yield_ms, early} -> the same, without writing; with `early`,
//                                              as soon as there is output (interactive use)
//   (pty_write with "take_output": false answers at once and leaves the output for a read)
//   pty_resize {session_id, cols, rows}
//   pty_kill   {session_id} | {all: true}
//
// Ctrl-C is the byte 0x03: the terminal's line discipline turns it into SIGINT for the
// foreground process group, as on any terminal. No deadline: a session lives until its
// command exits, it is killed, pruned, or the sandbox stops. Bounded: 64 sessions (the
// least recently used one beyond the 8 newest is pruned for a 65th), 1 MiB of unread
// output each (the oldest bytes go first, and the next answer says how many).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"
#include "runtime/core/command.h"
#include "runtime/protocol/frame.h"
#include "runtime/supervisor/event_loop.h"
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

class PtyHost {
 public:
  virtual ~PtyHost() = default;
  // The master of a new terminal in the sandbox's own devpts instance.
  virtual Result<UniqueFd> open_pty_master() = 0;
  // Starts the command with `slave` as its controlling terminal and stdio.
  virtual Result<uint64_t> spawn_on_tty(const Launch& launch, int slave) = 0;
  virtual void signal_in_sandbox(uint64_t command_id, int signal, bool whole_group) = 0;
  virtual EventLoop& loop() = 0;
  virtual void send_to_client(int client_fd, const protocol::Json& message) = 0;  // no-op if gone
};

class PtySessions {
 public:
  static constexpr size_t kMaxSessions = 64;
  static constexpr size_t kKeepNewest = 8;
  static constexpr size_t kMaxBuffered = 1 << 20;
  static constexpr uint64_t kMaxYieldMs = 30000;
  static constexpr size_t kMaxInput = 1 << 20;

  explicit PtySessions(PtyHost& host) : host_(host) {}
  ~PtySessions() { kill_all(); }

  // Each answers `client_fd` once, at once or after the request's window.
  void handle(int client_fd, const std::string& op, const protocol::Json& request);
  // init's news about a command: true if it was a session's.
  bool on_init_message(uint64_t command_id, const protocol::Json& message);
  // A client connection closed: its waits are dropped (its fd number may be reused).
  void client_gone(int client_fd);
  void kill_all();

 private:
  struct Waiter {
    int client_fd;
    int timer;
    bool early;  // answered as soon as output comes
  };
  struct Session {
    uint64_t id = 0;
    uint64_t command = 0;
    UniqueFd master;
    std::string output;     // not yet read (kept to kMaxBuffered; trimmed when twice that)
    std::string input;      // typed, not yet taken by the terminal (at most kMaxInput)
    uint64_t dropped = 0;   // bytes dropped from `output` since the last read
    std::optional<int> exit_code;
    std::chrono::steady_clock::time_point last_used;
    std::vector<Waiter> waiters;
  };

  void start(int client_fd, const protocol::Json& request);
  void exchange(int client_fd, const protocol::Json& request, bool writes);
  void resize(int client_fd, const protocol::Json& request);
  void kill(int client_fd, const protocol::Json& request);
  Result<Session*> find(const protocol::Json& request);
  void on_events(uint64_t id, uint32_t events);
  void take_output(Session& s);
  void trim(Session& s);
  Result<void> feed(Session& s);
  void send_answer(Session& s, int client_fd);
  void answer(Session& s, int client_fd);
  void answer_waiters(Session& s);
  void end(uint64_t id);
  void prune();
  void error(int client_fd, const Error& e);

  PtyHost& host_;
  std::map<uint64_t, Session> sessions_;
  uint64_t next_id_ = 1;
};

}  // namespace nsbox
