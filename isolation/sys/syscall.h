// Thin wrappers for the syscalls glibc 2.36 has no wrapper for, and one EINTR retry helper.
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace nsbox::sys {

// Retries a call that failed with EINTR. Every interruptible call in nsbox goes through it.
template <class F>
auto retry_eintr(F&& f) {
  for (;;) {
    auto r = f();
    if (!(r == -1 && errno == EINTR)) return r;
  }
}

inline int pivot_root(const char* new_root, const char* put_old) {
  return static_cast<int>(::syscall(SYS_pivot_root, new_root, put_old));
}

inline int pidfd_open(pid_t pid, unsigned flags) {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, flags));
}

inline int close_range(unsigned first, unsigned last, unsigned flags) {
  return static_cast<int>(::syscall(SYS_close_range, first, last, flags));
}

}  // namespace nsbox::sys
