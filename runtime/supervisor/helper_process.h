// One host-side helper process of a sandbox: a bucket server, the tool bridge, the network
// proxy. They are started, watched and stopped the same way, here:
//
//   - started with exactly the fds it is given (`fds[i]` becomes fd i) and exactly the
//     environment it is given (helper_environment: the proxy settings, a PATH, what the
//     kind adds; nothing else of the supervisor's), killed with the supervisor
//     (PR_SET_PDEATHSIG);
//   - secrets and configuration go to it on a pipe (send_config), wiped here once written;
//   - readiness is one line of JSON it writes on a report fd (read_report), bounded in time;
//   - its exit is a pidfd the event loop watches; reap() says how it ended;
//   - stop_all() ends several at once within one bound: SIGTERM, a grace, SIGKILL.
//
// Logs: a helper writes its own file (given in its config), or inherits the supervisor's
// stderr (the supervisor's log) as fd 2.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox {

struct HelperLaunch {
  std::string program;                   // an absolute path
  std::vector<std::string> argv;         // argv[0] first
  std::vector<int> fds;                  // the child's fds 0..n-1 (-1: /dev/null), at most 8
  std::vector<std::string> environment;  // the whole environment (helper_environment)
  std::string what;                      // "the tool bridge": for errors and logs
  // Namespaces joined before exec, in order: (an open /proc/PID/ns/* fd, CLONE_NEW*). A
  // user namespace first gives the capabilities the others need.
  std::vector<std::pair<int, int>> join = {};
  // Capabilities kept across exec as ambient ones (CAP_*): what joining a user namespace
  // gave is otherwise lost at exec by a uid that is not root there.
  std::vector<int> ambient = {};
};

// The supervisor's proxy settings (its environment is scrubbed already), a PATH, and `extra`.
std::vector<std::string> helper_environment(std::vector<std::string> extra = {});

class HelperProcess {
 public:
  HelperProcess() = default;
  HelperProcess(HelperProcess&& other) noexcept { *this = std::move(other); }
  HelperProcess& operator=(HelperProcess&& other) noexcept;  // stops what this one had
  ~HelperProcess() { stop(0); }

  static Result<HelperProcess> start(const HelperLaunch& launch);

  pid_t pid() const { return pid_; }
  int pidfd() const { return pidfd_.get(); }  // readable once it has exited; open while the object lives
  bool running() const { return pid_ > 0; }
  const std::string& what() const { return what_; }
  // Once it has exited (the pidfd is readable): reaps it and says how it ended ("exited
  // with status 3", "was killed by signal 9"); "" if it has not exited.
  std::string reap();
  // SIGTERM, up to `grace_ms` for it to go, then SIGKILL; reaped either way.
  void stop(int grace_ms);
  // All at once, so that the bound is that of one: SIGTERM to each, up to `grace_ms`,
  // SIGKILL to those left, up to `kill_ms`; one that outlives that is logged, not waited for.
  static void stop_all(const std::vector<HelperProcess*>& helpers, int grace_ms, int kill_ms);

 private:
  bool reaped_within(int timeout_ms);  // true once it is reaped (or was never started)
  pid_t pid_ = 0;
  UniqueFd pidfd_;
  std::string what_;
};

// Writes `text` to `fd` (a helper's config pipe) with SIGPIPE ignored, then wipes `text`
// (it may hold keys) and closes `fd`.
Result<void> send_config(UniqueFd fd, std::string& text, const std::string& what);

// The first line a helper writes on its report fd, within `timeout_ms`: a timeout or EOF
// before a line is an error naming `what`.
Result<std::string> read_report(int fd, int timeout_ms, const std::string& what);

}  // namespace nsbox
