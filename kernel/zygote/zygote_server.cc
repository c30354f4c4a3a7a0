#include "kernel/zygote/zygote_server.h"

#include <Python.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "generated/build_stamp.h"
#include "isolation/sys/fd_passing.h"
#include "isolation/sys/spawn.h"
#include "isolation/sys/syscall.h"
#include "isolation/sys/unique_fd.h"
#include "kernel/zygote/zygote_child.h"
#include "runtime/protocol/kernel_zygote.h"

namespace nsbox::kernel {
namespace {

using kernel_zygote::Reply;
using kernel_zygote::ReplyKind;

// A supervisor sends its request right after its connect; one that does not is not
// waited for longer (a loaded host can take a while to schedule it).
constexpr auto kRequestPatience = std::chrono::seconds(2);

void say(const std::string& text) { std::fprintf(stderr, "nsbox-kernel-zygote: %s\n", text.c_str()); }

// The intermediate's stack (zygote_child.h: it shares our memory): its own C++ frames
// need a few KiB; 256 KiB of our main stack (clone_on_our_stack).
constexpr size_t kIntermediateStack = 256 * 1024;

// The kernel's half of the interpreter's fork hooks: the zygote ran PyOS_BeforeFork
// before the intermediate and runs PyOS_AfterFork_Parent after it, so the memory the
// kernel is forked from is the zygote's at a fork.
void python_after_fork_child() { PyOS_AfterFork_Child(); }

// What the zygote hands its intermediate, in the memory they share.
struct Intermediate {
  ChildFds fds;
  const seccomp::Program* program;
  int (*run_kernel)(const std::string&);
  pid_t kernel = 0;  // written by the intermediate once forked
};

// Not instrumented: it runs on a stack AddressSanitizer does not know.
__attribute__((no_sanitize_address)) int run_intermediate(void* arg) {
  auto* job = static_cast<Intermediate*>(arg);
  make_kernel(job->fds, *job->program, &job->kernel, python_after_fork_child, job->run_kernel);
}

// The intermediate runs on a buffer *in our main stack*, and the kernel it forks goes on
// from there: so the kernel's stack is the process's main stack as an exec'd kernel's is,
// growing down into the rest of that mapping to RLIMIT_STACK, with its guard gap. (On a
// heap buffer, a cell recursing deeply through C code — repr() of a list nested 20,000
// deep — wrote past it into the kernel's own heap: tested in kernel_zygote_test.cc.)
// What lies below the buffer here is only this call's frames, dead in the kernel.
__attribute__((noinline)) int clone_on_our_stack(Intermediate& job) {
  alignas(16) char stack[kIntermediateStack];
  return sys::vfork_call(run_intermediate, &job, std::span<char>(stack, sizeof stack));
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
      if (p[0].revents & POLLIN) accept_one(reaped.get());
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
      if (it == kernels_.end() || !(WIFEXITED(status) || WIFSIGNALED(status))) continue;  // only an end is one
      Reply reply{};
      reply.kind = ReplyKind::kExited;
      reply.pid = pid;
      reply.status = status;
      send_reply(it->second.get(), reply);  // its supervisor may be gone: MSG_NOSIGNAL, ignored
      kernels_.erase(it);
    }
  }

  // Until the request is there, reaping the kernels that end meanwhile: a sandbox's end
  // waits for its kernel to be reaped (its init's zap_pid_ns_processes), so a peer that
  // is slow to ask must not hold up every sandbox's end (the third review's L3).
  bool await_request(int connection, int reaped) {
    auto give_up_at = std::chrono::steady_clock::now() + kRequestPatience;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up_at - std::chrono::steady_clock::now()).count();
      pollfd p[2] = {{connection, POLLIN, 0}, {reaped, POLLIN, 0}};
      if (left <= 0 || sys::retry_eintr([&] { return ::poll(p, 2, static_cast<int>(left)); }) <= 0) return false;
      if (p[1].revents) reap(reaped);
      if (p[0].revents) return true;
    }
  }

  // A pidfd, by what /proc says the fd is.
  static bool is_pidfd(int fd) {
    char target[64] = {};
    std::string link = "/proc/self/fd/" + std::to_string(fd);
    ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
    return n > 0 && std::string(target, static_cast<size_t>(n)) == "anon_inode:[pidfd]";
  }

  void accept_one(int reaped) {
    // Non-blocking: no send of ours (a reply, the intermediate's) waits on a supervisor
    // that does not read.
    UniqueFd connection(::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
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
    if (!await_request(connection.get(), reaped)) return;
    kernel_zygote::Request request{};
    std::vector<UniqueFd> fds;
    ssize_t n = sys::recv_with_fds(connection.get(), &request, sizeof request, fds,
                                   kernel_zygote::kFixedFds + kernel_zygote::kMaxCgroupFds);
    if (n == sizeof request && request.magic == kernel_zygote::kPingMagic && fds.empty()) {
      send_reply(connection.get(), Reply{ReplyKind::kPong});  // the server asks whether we serve
      return;
    }
    if (n != sizeof request || request.magic != kernel_zygote::kMagic || request.cgroup_fds > kernel_zygote::kMaxCgroupFds ||
        fds.size() != size_t{kernel_zygote::kFixedFds} + request.cgroup_fds || !is_pidfd(fds[0].get())) {
      refuse(connection.get(), "a malformed request (header or fds)", EPROTO);
      return;
    }
    static_assert(sizeof kBuildStamp == sizeof request.build + 1);
    if (std::memcmp(request.build, kBuildStamp, sizeof request.build) != 0) {
      refuse(connection.get(), "the supervisor is of another build of nsbox than the zygote (installed again while the server ran)",
             ESTALE);
      // Ours is the old build when our binary was replaced: the server sees that and
      // starts the new one (kernel/zygote_keeper/kernel_zygote_process.h). A supervisor older than us
      // (a sandbox of before the install) gets its kernels through init.
      return;
    }
    if (kernels_.size() >= max_kernels_) {
      refuse(connection.get(), "the zygote already has " + std::to_string(kernels_.size()) + " kernels alive", EAGAIN);
      return;
    }
    // The intermediate shares our memory (sys::vfork_call, as posix_spawn's child does):
    // nothing of the zygote is copied for it, faulted in or torn down, and we wait, paused,
    // while it joins the namespaces and forks the kernel: so the kernel is forked from our
    // memory as it is here, between the interpreter's before- and after-fork hooks. Every
    // step it takes is a bounded system call (its sends do not wait), so no timeout is
    // needed. The kernel it leaves is ours to reap (we are a subreaper).
    Intermediate job{ChildFds{fds[0].get(), fds[1].get(), fds[2].get(), fds[3].get(), fds[4].get(), connection.get(), {}, arguments_},
                     &program_, run_kernel_};
    for (size_t i = kernel_zygote::kFixedFds; i < fds.size(); ++i) job.fds.cgroup_files.push_back(fds[i].get());
    PyOS_BeforeFork();
    int status = clone_on_our_stack(job);
    int clone_errno = errno;
    PyOS_AfterFork_Parent();
    if (status < 0) {
      refuse(connection.get(), std::string("clone the intermediate: ") + std::strerror(clone_errno), clone_errno);
      return;
    }
    if (job.kernel > 0) kernels_[job.kernel] = std::move(connection);
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
