#include "isolation/sys/spawn.h"

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include "isolation/sys/child_fds.h"
#include "isolation/sys/syscall.h"

namespace nsbox::sys {
namespace {

// Each of the two children runs on its own stack in the caller's memory; the caller's
// thread is suspended (CLONE_VFORK) until both have exec'd or exited, so neither stack is
// freed under them. execve and the fd calls need little; 64 KiB is ample.
constexpr size_t kStackBytes = 64 * 1024;

struct Launch {
  const char* path;
  char* const* argv;
  char* const* envp;
  std::span<const int> fds;
  char* grandchild_stack_top;
  int clone_errno = 0;  // set by the intermediate when it could not make the daemon
};

// Not instrumented (nor is detach): they run on stacks AddressSanitizer does not know.
__attribute__((no_sanitize_address)) int exec_program(void* arg) {
  auto* launch = static_cast<Launch*>(arg);
  if (!arrange_child_fds(launch->fds)) ::_exit(127);
  default_signals();
  ::execve(launch->path, launch->argv, launch->envp);
  ::_exit(127);
}

// The intermediate: a new session, the program as its child, then gone (the program is
// adopted). Every signal is still blocked here (vfork_call). CLONE_VFORK: clone returns
// once the program has exec'd; nobody waits for it.
__attribute__((no_sanitize_address)) int detach(void* arg) {
  auto* launch = static_cast<Launch*>(arg);
  ::setsid();
  if (::clone(exec_program, launch->grandchild_stack_top, CLONE_VM | CLONE_VFORK | SIGCHLD, arg) < 0) {
    launch->clone_errno = errno;  // our memory is the caller's
    ::_exit(1);
  }
  ::_exit(0);
}

}  // namespace

int vfork_call(int (*fn)(void*), void* arg, std::span<char> stack, int extra_flags) {
  sigset_t all, previous;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);
  pid_t pid = ::clone(fn, stack.data() + stack.size(), CLONE_VM | CLONE_VFORK | SIGCHLD | extra_flags, arg);
  int saved = errno;
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (pid < 0) {
    errno = saved;
    return -1;
  }
  int status = 0;
  retry_eintr([&] { return ::waitpid(pid, &status, 0); });  // it has exited already
  return status;
}

int spawn_daemon(const char* path, char* const argv[], char* const envp[], std::span<const int> fds) {
  std::unique_ptr<char[]> stacks(new char[2 * kStackBytes]);  // 16-byte aligned; stacks grow down
  Launch launch{path, argv, envp, fds, stacks.get() + 2 * kStackBytes};
  int status = vfork_call(detach, &launch, std::span<char>(stacks.get(), kStackBytes));
  if (status < 0) return -1;
  if (launch.clone_errno != 0) {
    errno = launch.clone_errno;
    return -1;
  }
  return 0;
}

}  // namespace nsbox::sys
