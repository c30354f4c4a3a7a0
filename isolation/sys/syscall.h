// Thin wrappers for the syscalls glibc 2.36 has no wrapper for, one EINTR retry helper, and
// random names from getrandom.
#pragma once

#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>

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

// pidfd_send_signal's PIDFD_SIGNAL_PROCESS_GROUP (Linux 6.9): a zygote kernel's group is
// signalled by its pidfd, never by a number (docs/kernel-zygote.md); without it kernels
// are exec'd by init.
constexpr unsigned kPidfdSignalProcessGroup = 1u << 2;
// Whether this kernel knows the flag: signal 0 by `pidfd` to the group it leads (ESRCH
// where it leads none; EINVAL where the flag is unknown).
inline bool can_signal_process_groups(int pidfd) {
  return ::syscall(SYS_pidfd_send_signal, pidfd, 0, nullptr, kPidfdSignalProcessGroup) == 0 || errno == ESRCH;
}
// The same, asked of this kernel by a pidfd of our own.
inline bool can_signal_process_groups() {
  int self = pidfd_open(::getpid(), 0);
  bool can = self >= 0 && can_signal_process_groups(self);
  if (self >= 0) ::close(self);
  return can;
}

inline int close_range(unsigned first, unsigned last, unsigned flags) {
  return static_cast<int>(::syscall(SYS_close_range, first, last, flags));
}

// `bytes` random bytes as lowercase hex (getrandom never fails for small reads once the
// pool is ready, which it is long before nsbox runs).
inline std::string random_hex(size_t bytes) {
  std::string out;
  static const char kHex[] = "0123456789abcdef";
  unsigned char buf[64];
  while (bytes > 0) {
    size_t want = bytes < sizeof buf ? bytes : sizeof buf;
    ssize_t n = ::getrandom(buf, want, 0);
    if (n <= 0) continue;
    for (ssize_t i = 0; i < n; ++i) out += {kHex[buf[i] >> 4], kHex[buf[i] & 15]};
    bytes -= static_cast<size_t>(n);
  }
  return out;
}

}  // namespace nsbox::sys
