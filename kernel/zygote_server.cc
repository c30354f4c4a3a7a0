#include "kernel/zygote_server.h"

#include <Python.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "isolation/sys/fd_passing.h"
#include "isolation/sys/syscall.h"
#include "isolation/sys/unique_fd.h"
#include "kernel/zygote_child.h"
#include "runtime/protocol/kernel_zygote.h"

namespace nsbox::kernel {
namespace {

using kernel_zygote::Reply;
using kernel_zygote::ReplyKind;

void say(const std::string& text) { std::fprintf(stderr, "nsbox-kernel-zygote: %s\n", text.c_str()); }

void send_reply(int connection, Reply reply, int fd = -1) { (void)sys::send_with_fd(connection, &reply, sizeof reply, fd); }

void refuse(int connection, const std::string& why, int error) {
  Reply reply{};
  reply.kind = ReplyKind::kFailed;
  reply.error = error;
  std::snprintf(reply.message, sizeof reply.message, "%s", why.c_str());
  send_reply(connection, reply);
}

class ForkServer {
 public:
  ForkServer(int listen_fd, const seccomp::Program& program, std::span<char> arguments,
             const std::function<int(int)>& run_kernel)
      : listen_fd_(listen_fd), program_(program), arguments_(arguments), run_kernel_(run_kernel) {}

  int run() {
    own_pid_ns_.reset(::open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC));
    if (!own_pid_ns_) return fail("open /proc/self/ns/pid");
    sigset_t child;
    sigemptyset(&child);
    sigaddset(&child, SIGCHLD);
    ::sigprocmask(SIG_BLOCK, &child, nullptr);  // the children default it again
    UniqueFd reaped(::signalfd(-1, &child, SFD_CLOEXEC | SFD_NONBLOCK));
    if (!reaped) return fail("signalfd(SIGCHLD)");
    for (;;) {
      pollfd p[2] = {{listen_fd_, POLLIN, 0}, {reaped.get(), POLLIN, 0}};
      if (sys::retry_eintr([&] { return ::poll(p, 2, -1); }) < 0) return fail("poll");
      if (p[1].revents) reap(reaped.get());
      if (p[0].revents & (POLLERR | POLLHUP | POLLNVAL)) return fail("poll the listening socket");
      if (p[0].revents & POLLIN) accept_one();
    }
  }

 private:
  int fail(const char* what) {
    say(std::string(what) + ": " + std::strerror(errno));
    return 1;
  }

  void reap(int signal_fd) {
    signalfd_siginfo info;
    while (::read(signal_fd, &info, sizeof info) == sizeof info) {
    }
    int status = 0;
    for (pid_t pid; (pid = ::waitpid(-1, &status, WNOHANG)) > 0;) {
      auto it = kernels_.find(pid);
      if (it == kernels_.end()) continue;
      Reply reply{};
      reply.kind = ReplyKind::kExited;
      reply.pid = pid;
      reply.status = status;
      send_reply(it->second.get(), reply);  // its supervisor may be gone: MSG_NOSIGNAL, ignored
      kernels_.erase(it);
    }
  }

  // Returns in the zygote only: a forked child runs its kernel and exits.
  void accept_one() {
    UniqueFd connection(::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC));
    if (!connection) return;
    // A supervisor sends its request at once; one that does not is not waited for long.
    timeval patience{2, 0};
    (void)::setsockopt(connection.get(), SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof patience);
    kernel_zygote::Request request{};
    std::vector<UniqueFd> fds;
    ssize_t n = sys::recv_with_fds(connection.get(), &request, sizeof request, fds,
                                   kernel_zygote::kFixedFds + kernel_zygote::kMaxCgroupFds);
    if (n != sizeof request || request.magic != kernel_zygote::kMagic ||
        fds.size() != kernel_zygote::kFixedFds + request.cgroup_fds) {
      refuse(connection.get(), "a malformed request (header or fds)", EPROTO);
      return;
    }
    request.sandbox[sizeof request.sandbox - 1] = '\0';
    if (kernels_.size() >= kMaxZygoteKernels) {
      refuse(connection.get(), "the zygote already has " + std::to_string(kernels_.size()) + " kernels alive", EAGAIN);
      return;
    }
    // Only children enter a pid namespace: ours for children is the sandbox's until the
    // fork, then ours again.
    if (::setns(fds[0].get(), CLONE_NEWPID) != 0) {
      refuse(connection.get(), std::string("setns(init's pidfd, CLONE_NEWPID): ") + std::strerror(errno), errno);
      return;
    }
    PyOS_BeforeFork();
    pid_t pid = ::fork();
    if (pid == 0) {
      PyOS_AfterFork_Child();
      ChildFds child{fds[0].get(), fds[1].get(), fds[2].get(), fds[3].get(), connection.get(), {}, arguments_};
      for (size_t i = kernel_zygote::kFixedFds; i < fds.size(); ++i) child.cgroup_files.push_back(fds[i].get());
      int kernel_connection = become_sandbox_kernel(child, program_);
      ::_exit(run_kernel_(kernel_connection));  // nothing of the zygote's to unwind or flush
    }
    int fork_errno = errno;
    PyOS_AfterFork_Parent();
    if (::setns(own_pid_ns_.get(), CLONE_NEWPID) != 0) {
      // Every later child would be born in that sandbox: stop rather than serve wrongly.
      say(std::string("cannot return to our own pid namespace: ") + std::strerror(errno));
      ::_exit(1);
    }
    if (pid < 0) {
      refuse(connection.get(), std::string("fork: ") + std::strerror(fork_errno), fork_errno);
      return;
    }
    UniqueFd pidfd(sys::pidfd_open(pid, 0));
    Reply forked{};
    forked.kind = ReplyKind::kForked;
    forked.pid = pid;
    send_reply(connection.get(), forked, pidfd.get());
    kernels_[pid] = std::move(connection);
  }

  int listen_fd_;
  const seccomp::Program& program_;
  std::span<char> arguments_;
  const std::function<int(int)>& run_kernel_;
  UniqueFd own_pid_ns_;
  std::map<pid_t, UniqueFd> kernels_;  // alive, with the connection of the supervisor that asked
};

}  // namespace

int serve_forks(int listen_fd, const seccomp::Program& program, std::span<char> arguments,
                const std::function<int(int)>& run_kernel) {
  return ForkServer(listen_fd, program, arguments, run_kernel).run();
}

}  // namespace nsbox::kernel
