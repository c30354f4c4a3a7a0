// A kernel of one sandbox made by the kernel zygote (docs/kernel-zygote.md, "The child's
// steps"): what init's spawn of nsbox-kernel gives a kernel, made by joining the
// sandbox's init instead of descending from it. Two processes: an intermediate, outside
// the sandbox's pid namespace and cgroup (nothing of the sandbox can see it), joins the
// namespaces and forks the kernel, which is born inside them and joins the cgroup first.
#pragma once

#include <sys/types.h>

#include <span>
#include <string>
#include <vector>

#include "isolation/seccomp_policy.h"

namespace nsbox::kernel {

struct ChildFds {
  int init_pidfd;
  int stdout_fd, stderr_fd, channel;
  int setup;                      // the kernel's end of the set-up pair with the supervisor
  int connection;                 // the zygote's with the supervisor: never the kernel's
  std::vector<int> cgroup_files;  // write "0" to each to join
  std::span<char> arguments;      // the zygote's argv strings, end to end (renamed)
};

// The intermediate, a child of the zygote that shares its memory (CLONE_VM | CLONE_VFORK:
// the zygote waits, paused, until it has exited; it has its own fd table and
// namespaces): closes every fd but the request's, `setns(init's pidfd, every namespace)`
// at once, forks the kernel (born in the sandbox's namespaces, from the zygote's memory),
// sends the supervisor its pidfd (kForked) on the connection, writes the kernel's host
// pid to `*kernel_pid` (the zygote's memory) and exits; it never joins the sandbox's
// cgroup. A failed step is reported on the connection (kFailed). Only bounded system
// calls: the connection does not block (SOCK_NONBLOCK). The kernel joins the cgroup
// first, then becomes the sandbox's (zygote_child.cc) and runs `run_kernel(config)`; it
// never returns here. `after_fork` is the interpreter's after-fork hook, run by the kernel
// once it has copied the zygote's pages.
[[noreturn]] void make_kernel(const ChildFds& fds, const seccomp::Program& program, pid_t* kernel_pid, void (*after_fork)(),
                              int (*run_kernel)(const std::string& config));

}  // namespace nsbox::kernel
