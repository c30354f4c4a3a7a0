// The pid 1 of a one-shot sandbox (`nsbox run`): instead of exec'ing nsbox-init and
// waiting to be told what to run, the set-up child itself starts the one command and
// reaps until it ends. It saves init's exec and two message round trips (about 0.4 ms of
// a ~4.5 ms start, docs/performance.md); it runs under the same seccomp filter, as the
// sandbox user, without capabilities, and never runs user code itself.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nsbox::command_pid1 {

struct Command {
  std::vector<std::string> argv;
  std::vector<std::string> env;
  std::string cwd = "/home/user";
  int stdin_fd = -1;  // -1: /dev/null
  int stdout_fd = -1;
  int stderr_fd = -1;
};

// What pid 1 tells the launcher's caller, over the setup socket, one struct per event.
struct Report {
  enum Kind : int32_t { kStarted = 1, kExecFailed = 2, kExited = 3 };
  int32_t kind;
  int32_t value;  // started: the command's pid; exec failed: errno; exited: wait status
};

// Never returns: forks the command, reports, reaps everything, exits when it has ended
// (and with it, everything else in the pid namespace).
[[noreturn]] void run(const Command& command, int report_fd);

}  // namespace nsbox::command_pid1
