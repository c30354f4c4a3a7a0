// A child of the kernel zygote becoming a kernel of one sandbox (docs/kernel-zygote.md,
// "The child's steps"): what init's spawn of nsbox-kernel gives a kernel today, made by
// joining the sandbox's init instead of descending from it. The zygote forked this
// process already inside the sandbox's pid namespace.
#pragma once

#include <span>
#include <vector>

#include "isolation/seccomp_policy.h"

namespace nsbox::kernel {

struct ChildFds {
  int init_pidfd;
  int stdout_fd, stderr_fd, channel;
  int connection;               // to the supervisor that asked
  std::vector<int> cgroup_files;  // write "0" to each to join
  std::span<char> arguments;      // the zygote's argv strings, end to end (renamed)
};

// In order: the zygote's pages copied; an empty signal mask; named and its cmdline
// written as an exec'd kernel's; the sandbox's cgroup (as host root, before
// leaving the host's namespaces); setns into init's user, mount, network, ipc, uts and
// cgroup namespaces at once (which moves root and cwd to the sandbox's); fds 0 /dev/null,
// 1-2 the output pipes, 3 the channel, 4 the connection, nothing else; the sandbox user;
// a session of its own; the rlimits; /home/user; no capabilities and no_new_privs; the
// seccomp filter, whose new listener goes to the supervisor (kReady). Returns the
// connection's fd (4), from which the kernel reads its environment. A failed step is
// reported on the connection (kFailed, with the step and errno) and the process _exits.
int become_sandbox_kernel(const ChildFds& fds, const seccomp::Program& program);

}  // namespace nsbox::kernel
