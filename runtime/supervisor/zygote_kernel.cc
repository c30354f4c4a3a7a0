#include "runtime/supervisor/zygote_kernel.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>

#include "generated/build_stamp.h"
#include "isolation/sys/fd_passing.h"
#include "isolation/sys/syscall.h"
#include "runtime/protocol/frame.h"
#include "runtime/protocol/kernel_zygote.h"
#include "runtime/protocol/unix_socket.h"

namespace nsbox {
namespace {

using kernel_zygote::Reply;
using kernel_zygote::ReplyKind;

// "Pid:" and the last "NSpid:" of a pidfd's fdinfo (the process it pins, not a number
// that could be reused).
struct PidfdInfo {
  pid_t host_pid = 0, inner_pid = 0;
};
PidfdInfo pidfd_info(int pidfd) {
  PidfdInfo info;
  std::ifstream fdinfo("/proc/self/fdinfo/" + std::to_string(pidfd));
  for (std::string line; std::getline(fdinfo, line);) {
    if (line.starts_with("Pid:")) info.host_pid = std::atoi(line.c_str() + 4);
    if (!line.starts_with("NSpid:")) continue;
    std::istringstream fields(line.substr(6));
    for (pid_t pid; fields >> pid;) info.inner_pid = pid;
  }
  return info;
}

// The kernel's environment, preload list and working directory, as one record.
Result<std::string> config_record(const ZygoteKernelRequest& r) {
  protocol::Json vars = protocol::Json::object();
  for (const auto& entry : r.env) {
    auto eq = entry.find('=');
    if (eq != std::string::npos) vars[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  std::string config = protocol::Json{{"env", vars}, {"preload", r.preload}, {"cwd", r.cwd}}.dump();
  if (config.size() > kernel_zygote::kMaxConfigBytes)
    return fail(make_error(ErrorCode::kInvalidArgument, "the kernel's environment is " + std::to_string(config.size()) +
                                                            " bytes; a kernel from the zygote takes at most " +
                                                            std::to_string(kernel_zygote::kMaxConfigBytes)));
  return config;
}

Result<void> send_request(int connection, const ZygoteKernelRequest& r) {
  if (r.cgroup_files.size() > kernel_zygote::kMaxCgroupFds)
    return fail(make_error(ErrorCode::kUnsupported, std::to_string(r.cgroup_files.size()) + " cgroup files to join; the zygote takes " +
                                                        std::to_string(kernel_zygote::kMaxCgroupFds)));
  kernel_zygote::Request header;
  header.cgroup_fds = static_cast<uint32_t>(r.cgroup_files.size());
  std::memcpy(header.sandbox, r.sandbox_id.data(), std::min(r.sandbox_id.size(), sizeof header.sandbox - 1));
  static_assert(sizeof kBuildStamp == sizeof header.build + 1);
  std::memcpy(header.build, kBuildStamp, sizeof header.build);
  std::vector<int> fds = {r.init_pidfd, r.stdout_fd, r.stderr_fd, r.channel, r.kernel_setup};
  for (const auto& f : r.cgroup_files) fds.push_back(f.get());
  if (sys::send_with_fds(connection, &header, sizeof header, fds) != sizeof header)
    return fail(sys_error("send the request to the kernel zygote"));
  return {};
}

// For the kernel only, once the zygote's side has handed us its pidfd (so a kernel that
// got the environment is always one we can signal): the zygote never holds it.
Result<void> send_config(int setup, const std::string& config) {
  // One record must hold it all (a SEQPACKET record is bounded by the sender's buffer):
  // root may set that past the default.
  int buffer = static_cast<int>(2 * kernel_zygote::kMaxConfigBytes);
  (void)::setsockopt(setup, SOL_SOCKET, SO_SNDBUFFORCE, &buffer, sizeof buffer);
  if (sys::retry_eintr([&] { return ::send(setup, config.data(), config.size(), MSG_NOSIGNAL); }) !=
      static_cast<ssize_t>(config.size()))
    return fail(sys_error("send the kernel's environment"));
  return {};
}

// One reply from `fd`; `from_zygote`: the connection (kForked, kFailed of the zygote's
// side, kExited), else the kernel's set-up pair (kReady, kFailed). A kind from the wrong
// side is a protocol error: the kernel can never speak for the zygote.
Result<void> take_reply(ZygoteKernel& k, int fd, bool from_zygote) {
  Reply reply{};
  UniqueFd passed;
  ssize_t n = sys::recv_with_fd(fd, &reply, sizeof reply, passed);
  if (n < 0) return fail(sys_error("read the kernel zygote's reply"));
  if (n != sizeof reply)
    return fail(make_error(ErrorCode::kProtocol, from_zygote ? "the kernel zygote went without a reply" : "the kernel went during its set-up"));
  reply.message[sizeof reply.message - 1] = '\0';
  if (reply.kind == ReplyKind::kFailed) {
    Error e = make_error(ErrorCode::kInternal, std::string(from_zygote ? "the kernel zygote: " : "the zygote's kernel: ") + reply.message +
                                                   (reply.error ? std::string(": ") + std::strerror(reply.error) : ""));
    e.sys_errno = reply.error;
    return fail(std::move(e));
  }
  if (from_zygote && reply.kind == ReplyKind::kForked && passed && !k.pidfd) {
    k.pidfd = std::move(passed);
    return {};
  }
  if (from_zygote && reply.kind == ReplyKind::kExited)
    return fail(make_error(ErrorCode::kInternal, "the zygote's kernel exited during its set-up (wait status " + std::to_string(reply.status) + ")"));
  if (!from_zygote && reply.kind == ReplyKind::kReady && passed && !k.seccomp_listener) {
    k.seccomp_listener = std::move(passed);
    return {};
  }
  return fail(make_error(ErrorCode::kProtocol, "an unexpected reply while the kernel started"));
}

// Until the kernel is born (then it gets `config`) and holds its filter.
Result<void> await_ready(ZygoteKernel& k, int setup, const std::string& config) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kZygoteKernelStartTimeoutMs);
  bool config_sent = false;
  while (!k.pidfd || !k.seccomp_listener) {
    if (k.pidfd && !config_sent) {
      NSBOX_CHECK(send_config(setup, config));
      config_sent = true;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    pollfd p[2] = {{k.connection.get(), POLLIN, 0}, {setup, POLLIN, 0}};
    if (left <= 0 || sys::retry_eintr([&] { return ::poll(p, 2, static_cast<int>(left)); }) == 0)
      return fail(make_error(ErrorCode::kTimeout, "the kernel was not ready within " +
                                                      std::to_string(kZygoteKernelStartTimeoutMs / 1000) + " s of asking the zygote"));
    if (p[0].revents) NSBOX_CHECK(take_reply(k, k.connection.get(), true));
    if (p[1].revents) NSBOX_CHECK(take_reply(k, setup, false));
  }
  return {};
}

// Whether two processes, by pid and held by pidfd, share a pid namespace: the links'
// inodes compared, then both pidfds asked whether their process is still there (so
// neither pid was reused in between).
bool same_pid_namespace(pid_t a, int a_pidfd, pid_t b, int b_pidfd) {
  struct stat sa{}, sb{};
  if (::stat(("/proc/" + std::to_string(a) + "/ns/pid").c_str(), &sa) != 0 ||
      ::stat(("/proc/" + std::to_string(b) + "/ns/pid").c_str(), &sb) != 0)
    return false;
  bool alive = ::syscall(SYS_pidfd_send_signal, a_pidfd, 0, nullptr, 0) == 0 &&
               ::syscall(SYS_pidfd_send_signal, b_pidfd, 0, nullptr, 0) == 0;
  return alive && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

}  // namespace

Result<ZygoteKernel> start_zygote_kernel(ZygoteKernelRequest request) {
  ZygoteKernel k;
  // All made before the connect, so that the request follows it at once (the zygote waits
  // for it only so long).
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) return fail(sys_error("socketpair for the kernel's set-up"));
  UniqueFd setup(pair[0]), kernel_setup(pair[1]);
  request.kernel_setup = kernel_setup.get();
  std::string config = NSBOX_TRY(config_record(request));
  // Non-blocking: a zygote whose backlog is full is EAGAIN at once, never a supervisor
  // held in connect(). One that is stopped with room in its backlog is found out by the
  // 10 s bound below (then this sandbox's kernels start through init: supervisor.cc).
  auto connected = protocol::connect_unix(request.socket, SOCK_SEQPACKET | SOCK_NONBLOCK);
  if (!connected) return fail(std::move(connected.error()).context("reach the kernel zygote"));
  k.connection = std::move(*connected);
  // It gets init's pidfd and the cgroup's files: only a zygote of our own user may.
  ucred peer{};
  socklen_t length = sizeof peer;
  if (::getsockopt(k.connection.get(), SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0)
    return fail(sys_error("SO_PEERCRED of the kernel zygote"));
  if (peer.uid != ::geteuid())
    return fail(make_error(ErrorCode::kPermissionDenied, "the kernel zygote at " + request.socket + " runs as uid " +
                                                             std::to_string(peer.uid) + ", not ours"));
  NSBOX_CHECK(send_request(k.connection.get(), request));
  kernel_setup.reset();  // the kernel's now: EOF here if it goes
  auto ready = await_ready(k, setup.get(), config);
  if (ready) {
    // The kernel's pids by its pidfd; it must be in init's pid namespace.
    PidfdInfo kernel = pidfd_info(k.pidfd.get()), init = pidfd_info(request.init_pidfd);
    k.host_pid = kernel.host_pid;
    k.sandbox_pid = kernel.inner_pid;
    if (kernel.host_pid <= 0 || !same_pid_namespace(kernel.host_pid, k.pidfd.get(), init.host_pid, request.init_pidfd))
      ready = fail(make_error(ErrorCode::kProtocol, "the zygote's kernel is not in the sandbox's pid namespace"));
  }
  if (!ready) {
    if (k.pidfd) (void)::syscall(SYS_pidfd_send_signal, k.pidfd.get(), SIGKILL, nullptr, 0);
    return fail(std::move(ready.error()));
  }
  return k;
}

Result<void> ZygoteKernels::adopt(uint64_t id, ZygoteKernel kernel) {
  int listener = kernel.seccomp_listener.get(), connection = kernel.connection.get();
  kernels_[id] = std::move(kernel);
  auto watched = [&]() -> Result<void> {
    NSBOX_CHECK(loop_.add(listener, EPOLLIN, [this, listener](uint32_t events) { on_listener(listener, events); }));
    return loop_.add(connection, EPOLLIN, [this, id](uint32_t) { on_report(id); });
  }();
  if (!watched) {
    signal(id, SIGKILL, true);
    loop_.remove(listener);
    kernels_.erase(id);
  }
  return watched;
}

void ZygoteKernels::on_listener(int listener, uint32_t events) {
  if (events & EPOLLIN) on_violation_(seccomp::take_violation(listener));
  if (!(events & (EPOLLHUP | EPOLLERR))) return;
  // No process uses the filter any more (Linux >= 5.8 says so by a hang-up): no violation
  // can come, and a hang-up stays reported, so watched on it would wake the loop for ever
  // (Linux >= 6.11: the receive fails at once) or block it in the receive (before).
  drain_violations(listener);
  loop_.remove(listener);
  std::erase_if(retired_listeners_, [listener](const UniqueFd& fd) { return fd.get() == listener; });
}

void ZygoteKernels::drain_violations(int listener) {
  for (pollfd p{listener, POLLIN, 0}; ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN);)
    on_violation_(seccomp::take_violation(listener));
}

void ZygoteKernels::signal(uint64_t id, int signal, bool whole_group) {
  auto it = kernels_.find(id);
  if (it == kernels_.end()) return;
  // By the pidfd, never by a number: the group is the kernel's (it leads one), and a
  // kernel already gone is not confused with whoever has its pid now.
  (void)::syscall(SYS_pidfd_send_signal, it->second.pidfd.get(), signal, nullptr, whole_group ? sys::kPidfdSignalProcessGroup : 0u);
}

void ZygoteKernels::on_report(uint64_t id) {
  auto it = kernels_.find(id);
  if (it == kernels_.end()) return;
  ZygoteKernel& k = it->second;
  if (k.connection) {
    Reply reply{};
    UniqueFd ignored;
    ssize_t n = sys::recv_with_fd(k.connection.get(), &reply, sizeof reply, ignored);
    if (n == sizeof reply && reply.kind == ReplyKind::kExited) return finish(id, reply.status);
    if (n < 0 && errno == EAGAIN) return;
    // The zygote went without a report: the kernel lives on, and its pidfd says its end.
    loop_.remove(k.connection.get());
    k.connection.reset();
    if (!loop_.add(k.pidfd.get(), EPOLLIN, [this, id](uint32_t) { on_report(id); })) finish(id, std::nullopt);
    return;
  }
  finish(id, std::nullopt);  // the pidfd: it has ended, how is the zygote's to know
}

void ZygoteKernels::finish(uint64_t id, std::optional<int> status) {
  auto it = kernels_.find(id);
  ZygoteKernel k = std::move(it->second);
  kernels_.erase(it);
  drain_violations(k.seccomp_listener.get());
  for (int fd : {k.connection.get(), k.pidfd.get()})
    if (fd >= 0) loop_.remove(fd);
  // Processes the kernel started (in sessions of their own) live on under its filter:
  // their violations are still reported, until the last of them ends (on_listener) or
  // more kernels than kRetiredListeners have ended since (then theirs get ENOSYS). One
  // that has hung up already (left the loop in on_listener) has nobody left: closed.
  pollfd hung{k.seccomp_listener.get(), POLLIN, 0};
  if (::poll(&hung, 1, 0) == 1 && (hung.revents & (POLLHUP | POLLERR))) {
    loop_.remove(k.seccomp_listener.get());
    k.seccomp_listener.reset();
  } else {
    retired_listeners_.push_back(std::move(k.seccomp_listener));
  }
  if (retired_listeners_.size() > kRetiredListeners) {
    loop_.remove(retired_listeners_.front().get());
    retired_listeners_.pop_front();
  }
  std::optional<int> code, signal;
  if (status && WIFEXITED(*status)) code = WEXITSTATUS(*status);
  if (status && WIFSIGNALED(*status)) signal = WTERMSIG(*status);
  if (!status) signal = SIGKILL;  // ended without the zygote: as the pid namespace's end kills
  on_exit_(id, code, signal);
}

}  // namespace nsbox
