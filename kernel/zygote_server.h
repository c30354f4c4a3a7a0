// The kernel zygote's fork server (docs/kernel-zygote.md): one single-threaded process
// with Python initialised and nsbox_kernel imported, forking a kernel per request from a
// supervisor. It reads only each request's fixed header and fds (never an environment:
// runtime/protocol/kernel_zygote.h), forks the child into the sandbox's pid namespace,
// hands the supervisor the child's pidfd, and when it reaps a kernel, says how it ended.
#pragma once

#include <functional>

#include "isolation/seccomp_policy.h"

namespace nsbox::kernel {

// At most this many kernels alive at once (one connection each); more are refused.
constexpr size_t kMaxZygoteKernels = 4096;

// Serves until `listen_fd` fails (its server closed it, or the zygote is being stopped).
// `run_kernel(connection_fd)` runs in each child once it is the sandbox's (the
// interpreter's fork hooks already run) and returns the child's exit code.
int serve_forks(int listen_fd, const seccomp::Program& program, const std::function<int(int)>& run_kernel);

}  // namespace nsbox::kernel
