// The seccomp policy every sandboxed process runs under, and its compiled BPF program.
//
// An allowlist in the spirit of Docker's default profile:
//   - allowed syscalls run; everything else fails with EPERM (the default action);
//   - numbers libseccomp does not know (newer than its table), clone3 and io_uring fail
//     with ENOSYS, so glibc, CPython and libraries fall back to older calls;
//   - clone with any namespace flag, ioctl(TIOCSTI) and socket(AF_VSOCK) fail with EPERM,
//     compared on the low 32 bits the kernel actually uses (CVE-2019-10063);
//   - a syscall from another ABI (i386 int 0x80, x32) goes to the supervisor through a
//     user-notification listener, which records which syscall it was and kills the process.
#pragma once

#include <linux/filter.h>

#include <cstdint>
#include <string>
#include <vector>

#include "isolation/sys/error.h"

namespace nsbox::seccomp {

struct Program {
  std::vector<sock_filter> code;
};

// Builds the policy with libseccomp (about a millisecond).
Result<Program> compile();
// compile(), cached on disk under `cache_dir`, keyed by policy_fingerprint of this
// executable's build.
Result<Program> compile_cached(const std::string& cache_dir);
// The cache key: the allowlist tables, libseccomp's version and `build_id` (the code that
// builds the conditional rules changes with the build).
std::string policy_fingerprint(std::string_view build_id);
// The GNU build id of the running executable, hex; empty if it was linked without one.
std::string executable_build_id();

// In the sandbox child, after no_new_privs; the last step before exec. Returns the
// user-notification listener fd, to be handed to the supervisor.
Result<int> install(const Program& program);

// "getpid (i386)" for a syscall number of an audit arch, for messages.
std::string describe_syscall(uint32_t audit_arch, int nr);

// Names used by tests and `nsbox doctor`.
const std::vector<const char*>& allowed_syscalls();

}  // namespace nsbox::seccomp
