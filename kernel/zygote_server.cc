#include "kernel/zygote_server.h"

#include <Python.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
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

constexpr int kIntermediateTimeoutMs = 2000;

void say(const std::string& text) { std::fprintf(stderr, "nsbox-kernel-zygote: %s\n", text.c_str()); }

// fork() with the interpreter's hooks around it (its locks, its at-fork handlers).
pid_t fork_with_python() {
  PyOS_BeforeFork();
  pid_t pid = ::fork();
  if (pid == 0) PyOS_AfterFork_Child();
  else PyOS_AfterFork_Parent();
  return pid;
}

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
             int (*run_kernel)(const std::string&))
      : listen_fd_(listen_fd), program_(program), arguments_(arguments), run_kernel_(run_kernel) {}

  int run() {
    // Kernels outlive the intermediate that forked them: they are reparented to us.
    if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) return fail("prctl(PR_SET_CHILD_SUBREAPER)");
    // One fd per live kernel: the soft limit raised to the hard one, and kept below.
    rlimit files{};
    if (::getrlimit(RLIMIT_NOFILE, &files) == 0) {
      files.rlim_cur = files.rlim_max;
      (void)::setrlimit(RLIMIT_NOFILE, &files);
      if (files.rlim_cur != RLIM_INFINITY && files.rlim_cur < kMaxZygoteKernels + 64)
        max_kernels_ = files.rlim_cur > 128 ? files.rlim_cur - 64 : 64;
    }
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

  // A pidfd, by what /proc says the fd is.
  static bool is_pidfd(int fd) {
    char target[64] = {};
    std::string link = "/proc/self/fd/" + std::to_string(fd);
    ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
    return n > 0 && std::string(target, static_cast<size_t>(n)) == "anon_inode:[pidfd]";
  }

  // Returns in the zygote only: its children make the kernel and exit.
  void accept_one() {
    UniqueFd connection(::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC));
    if (!connection) {
      if (errno == EMFILE || errno == ENFILE) ::usleep(10000);  // not a busy loop while full
      return;
    }
    // Only a process of our own user (the server's supervisors) may ask: a request names
    // namespaces the child joins as host root.
    ucred peer{};
    socklen_t length = sizeof peer;
    if (::getsockopt(connection.get(), SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0 || peer.uid != ::geteuid()) return;
    // A supervisor sends its request at once; one that does not is not waited for long.
    timeval patience{2, 0};
    (void)::setsockopt(connection.get(), SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof patience);
    kernel_zygote::Request request{};
    std::vector<UniqueFd> fds;
    ssize_t n = sys::recv_with_fds(connection.get(), &request, sizeof request, fds,
                                   kernel_zygote::kFixedFds + kernel_zygote::kMaxCgroupFds);
    if (n != sizeof request || request.magic != kernel_zygote::kMagic || request.cgroup_fds > kernel_zygote::kMaxCgroupFds ||
        fds.size() != size_t{kernel_zygote::kFixedFds} + request.cgroup_fds || !is_pidfd(fds[0].get())) {
      refuse(connection.get(), "a malformed request (header or fds)", EPROTO);
      return;
    }
    if (kernels_.size() >= max_kernels_) {
      refuse(connection.get(), "the zygote already has " + std::to_string(kernels_.size()) + " kernels alive", EAGAIN);
      return;
    }
    int report[2];
    if (::pipe2(report, O_CLOEXEC) != 0) {
      refuse(connection.get(), std::string("pipe2: ") + std::strerror(errno), errno);
      return;
    }
    UniqueFd report_r(report[0]), report_w(report[1]);
    pid_t intermediate = fork_with_python();
    if (intermediate == 0) {
      ChildFds child{fds[0].get(), fds[1].get(), fds[2].get(), fds[3].get(), fds[4].get(), connection.get(), {}, arguments_};
      for (size_t i = kernel_zygote::kFixedFds; i < fds.size(); ++i) child.cgroup_files.push_back(fds[i].get());
      make_kernel(child, program_, report_w.get(), fork_with_python, run_kernel_);
    }
    int fork_errno = errno;
    if (intermediate < 0) {
      refuse(connection.get(), std::string("fork: ") + std::strerror(fork_errno), fork_errno);
      return;
    }
    report_w.reset();
    // The intermediate only joins the namespaces and forks (a millisecond, outside the
    // sandbox's cgroup); it has said any failure to the supervisor itself. Bounded all the
    // same: one that does not report in time is killed. The kernel it leaves is ours to
    // reap (we are a subreaper).
    pollfd p{report_r.get(), POLLIN, 0};
    pid_t kernel = 0;
    bool reported = sys::retry_eintr([&] { return ::poll(&p, 1, kIntermediateTimeoutMs); }) == 1 &&
                    sys::retry_eintr([&] { return ::read(report_r.get(), &kernel, sizeof kernel); }) == sizeof kernel && kernel > 0;
    if (!reported) ::kill(intermediate, SIGKILL);
    (void)sys::retry_eintr([&] { return ::waitpid(intermediate, nullptr, 0); });
    if (reported) kernels_[kernel] = std::move(connection);
  }

  int listen_fd_;
  const seccomp::Program& program_;
  std::span<char> arguments_;
  int (*run_kernel_)(const std::string&);
  size_t max_kernels_ = kMaxZygoteKernels;
  std::map<pid_t, UniqueFd> kernels_;  // alive, with the connection of the supervisor that asked
};

}  // namespace

int serve_forks(int listen_fd, const seccomp::Program& program, std::span<char> arguments,
                int (*run_kernel)(const std::string& config)) {
  return ForkServer(listen_fd, program, arguments, run_kernel).run();
}

}  // namespace nsbox::kernel
