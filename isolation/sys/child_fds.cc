#include "isolation/sys/child_fds.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "isolation/sys/syscall.h"

namespace nsbox::sys {

bool arrange_child_fds(std::span<const int> sources) {
  constexpr size_t kMax = 8;
  if (sources.size() > kMax) return false;
  int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  int high[kMax];
  size_t count = 0;
  for (int fd : sources) high[count++] = ::fcntl(fd < 0 ? null_fd : fd, F_DUPFD_CLOEXEC, static_cast<int>(kMax) + 2);
  for (size_t i = 0; i < count; ++i)
    if (high[i] < 0 || ::dup2(high[i], static_cast<int>(i)) < 0) return false;
  return close_range(static_cast<unsigned>(count), ~0U, 0) == 0;
}

void die_with_parent(pid_t parent) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // it died before the line above: no signal would come
}

void prepare_child(pid_t parent, std::span<const int> sources) {
  die_with_parent(parent);
  // Nothing of the parent's (the supervisor's liveness lock above all).
  if (!arrange_child_fds(sources)) ::_exit(127);
  default_signals();
}

// The kernel's own struct (x86_64 and aarch64 alike): glibc's sigaction() refuses the two
// signals it keeps for itself (32, 33: thread cancellation, set*id), which a process may
// still have ignored (a sanitizer's runtime does) and an exec would carry over.
struct KernelSigaction {
  void* handler;
  unsigned long flags;
  void* restorer;
  uint64_t mask;
};

namespace {

// The hex mask after `key` ("\nSigIgn:\t0000000000001000"); false where it is not there.
bool status_mask(const char* status, const char* key, uint64_t* mask) {
  const char* at = std::strstr(status, key);
  if (!at) return false;
  at += std::strlen(key);
  while (*at == '\t' || *at == ' ') ++at;
  uint64_t value = 0;
  int digits = 0;
  for (;; ++at, ++digits) {
    char c = *at;
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) break;
    value = value << 4 | static_cast<uint64_t>(d);
  }
  *mask = value;
  return digits > 0;
}

}  // namespace

uint64_t signals_not_default() {
  char status[4096];
  int fd = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ~uint64_t{0};
  size_t length = 0;
  for (ssize_t n; length < sizeof status - 1 && (n = ::read(fd, status + length, sizeof status - 1 - length)) > 0;)
    length += static_cast<size_t>(n);
  ::close(fd);
  status[length] = '\0';
  uint64_t ignored = 0, caught = 0;
  if (!status_mask(status, "\nSigIgn:", &ignored) || !status_mask(status, "\nSigCgt:", &caught)) return ~uint64_t{0};
  return ignored | caught;
}

void default_signals() {
  KernelSigaction default_action{};  // SIG_DFL, no flags, nothing masked
  // Only those not at their default already: one read of /proc/self/status, not a
  // syscall for each of 64 signals (on the start-up path of every command).
  const uint64_t changed = signals_not_default();
  for (int sig = 1; sig < NSIG; ++sig)
    if ((changed >> (sig - 1) & 1) && sig != SIGKILL && sig != SIGSTOP)
      (void)::syscall(SYS_rt_sigaction, sig, &default_action, nullptr, sizeof default_action.mask);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

pid_t fork_child() {
  sigset_t all, previous;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);
  pid_t pid = ::fork();
  if (pid != 0) ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  return pid;
}

}  // namespace nsbox::sys
