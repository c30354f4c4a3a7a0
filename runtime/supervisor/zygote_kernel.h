// A Python kernel forked by the server's kernel zygote, from the supervisor's side
// (docs/kernel-zygote.md; the records are runtime/protocol/kernel_zygote.h). The kernel
// ends up as init's spawn would make it; here is only the asking, and what comes back:
// its pidfd (signals), its own seccomp listener (a filter is installed per kernel, never
// joined), and at its end the zygote's report of how it ended.
#pragma once

#include <sys/types.h>

#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "isolation/seccomp_violation.h"
#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"
#include "runtime/supervisor/event_loop.h"

namespace nsbox {

struct ZygoteKernelRequest {
  std::string socket;      // the zygote's
  std::string sandbox_id;  // for its log
  int init_pidfd = -1;
  std::vector<UniqueFd> cgroup_files;
  int stdout_fd = -1, stderr_fd = -1, channel = -1;
  int kernel_setup = -1;         // set by start_zygote_kernel: the kernel's end of the set-up pair
  std::vector<std::string> env;  // NAME=value: the kernel's whole environment
  std::string preload;           // comma-separated modules
  std::string cwd;               // its working directory (the sandbox's workspace root)
};

struct ZygoteKernel {
  UniqueFd connection;  // readable when the zygote reports the kernel's end (or is gone)
  UniqueFd pidfd;
  UniqueFd seccomp_listener;
  pid_t host_pid = 0;
  pid_t sandbox_pid = 0;  // in the sandbox's pid namespace
};

// Asks, and waits (at most kStartTimeoutMs) until the kernel holds its filter: its pidfd
// from the zygote's side (the connection), its listener from the kernel (a set-up pair of
// its own, so it can never speak for the zygote). On any failure a forked kernel is
// killed and the error names the step.
constexpr int kZygoteKernelStartTimeoutMs = 10000;
Result<ZygoteKernel> start_zygote_kernel(ZygoteKernelRequest request);

// The supervisor's kernels from the zygote (one at a time in practice; a restarted
// kernel's predecessor may still be ending), by the command id the kernel session knows
// them by: their fds in the loop, their signals, their end.
class ZygoteKernels {
 public:
  using OnViolation = std::function<void(Result<seccomp::Violation>)>;
  using OnExit = std::function<void(uint64_t id, std::optional<int> exit_code, std::optional<int> signal)>;

  ZygoteKernels(EventLoop& loop, OnViolation on_violation, OnExit on_exit)
      : loop_(loop), on_violation_(std::move(on_violation)), on_exit_(std::move(on_exit)) {}

  // Watches its listener and its end.
  Result<void> adopt(uint64_t id, ZygoteKernel kernel);
  bool owns(uint64_t id) const { return kernels_.count(id) != 0; }
  // The kernel (by its pidfd), or its whole process group (it leads one, setsid).
  void signal(uint64_t id, int signal, bool whole_group);

 private:
  void on_report(uint64_t id);
  // A kernel's seccomp listener: its violations, and its hang-up once no process uses the
  // filter (then it leaves the loop, and the retired list).
  void on_listener(int listener, uint32_t events);
  void drain_violations(int listener);  // those queued now
  // Violations still queued, then the end; the entry goes before on_exit (which may start the next).
  void finish(uint64_t id, std::optional<int> status);

  static constexpr size_t kRetiredListeners = 64;

  EventLoop& loop_;
  OnViolation on_violation_;
  OnExit on_exit_;
  std::map<uint64_t, ZygoteKernel> kernels_;
  std::deque<UniqueFd> retired_listeners_;  // of ended kernels whose filter still has a process
};

}  // namespace nsbox
