// The kernel zygote's fork server (docs/kernel-zygote.md): one single-threaded process
// with Python initialised and nsbox_kernel imported, making a kernel per request from a
// supervisor of its own user. It reads only each request's fixed header and fds (never an
// environment: runtime/protocol/kernel_zygote.h) and forks an intermediate that makes the
// kernel in the sandbox (kernel/zygote/zygote_child.h); it stays in its own namespaces, reaps
// the kernels (a subreaper) and says how each ended.
#pragma once

#include <span>
#include <string>

#include "isolation/seccomp_policy.h"

namespace nsbox::kernel {

// At most this many kernels alive at once (one connection each); more are refused.
constexpr size_t kMaxZygoteKernels = 4096;

// Serves until `listen_fd` fails. `arguments`: the zygote's own argv strings, which each
// kernel rewrites as an exec'd kernel's. `run_kernel(config)` runs in each kernel once it
// is the sandbox's (the interpreter's fork hooks already run), with the supervisor's
// record (environment, preload), and returns its exit code.
int serve_forks(int listen_fd, const seccomp::Program& program, std::span<char> arguments,
                int (*run_kernel)(const std::string& config));

}  // namespace nsbox::kernel
