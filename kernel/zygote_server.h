// The kernel zygote's fork server (docs/kernel-zygote.md): one single-threaded process
// with Python initialised and nsbox_kernel imported, forking a kernel per request from a
// supervisor. It reads only each request's fixed header and fds (never an environment:
// runtime/protocol/kernel_zygote.h), forks the child into the sandbox's pid namespace,
// hands the supervisor the child's pidfd, and when it reaps a kernel, says how it ended.
#pragma once

#include <functional>
#include <span>

#include "isolation/seccomp_policy.h"

namespace nsbox::kernel {

// At most this many kernels alive at once (one connection each); more are refused.
constexpr size_t kMaxZygoteKernels = 4096;

// Serves until `listen_fd` fails. `arguments`: the zygote's own argv strings, which each
// child rewrites as a kernel's. `run_kernel(connection_fd)` runs in each child once it is
// the sandbox's (the interpreter's fork hooks already run) and returns its exit code.
int serve_forks(int listen_fd, const seccomp::Program& program, std::span<char> arguments,
                const std::function<int(int)>& run_kernel);

}  // namespace nsbox::kernel
