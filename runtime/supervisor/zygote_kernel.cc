#include "runtime/supervisor/zygote_kernel.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>

#include "isolation/sys/fd_passing.h"
#include "isolation/sys/syscall.h"
#include "runtime/protocol/frame.h"
#include "runtime/protocol/kernel_zygote.h"
#include "runtime/protocol/unix_socket.h"

namespace nsbox {
namespace {

using kernel_zygote::Reply;
using kernel_zygote::ReplyKind;

// The last NSpid of /proc/<pid>/status: its pid in the innermost namespace, the sandbox's.
pid_t sandbox_pid_of(pid_t host_pid) {
  std::ifstream status("/proc/" + std::to_string(host_pid) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.starts_with("NSpid:")) {
      auto last = line.find_last_of(" \t");
      return last == std::string::npos ? 0 : std::atoi(line.c_str() + last + 1);
    }
  return 0;
}

Result<void> send_request(int connection, const ZygoteKernelRequest& r) {
  protocol::Json vars = protocol::Json::object();
  for (const auto& entry : r.env) {
    auto eq = entry.find('=');
    if (eq != std::string::npos) vars[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  std::string config = protocol::Json{{"env", vars}, {"preload", r.preload}}.dump();
  if (config.size() > kernel_zygote::kMaxConfigBytes)
    return fail(make_error(ErrorCode::kInvalidArgument, "the kernel's environment is " + std::to_string(config.size()) +
                                                            " bytes; a kernel from the zygote takes at most " +
                                                            std::to_string(kernel_zygote::kMaxConfigBytes)));
  if (r.cgroup_files.size() > kernel_zygote::kMaxCgroupFds)
    return fail(make_error(ErrorCode::kUnsupported, std::to_string(r.cgroup_files.size()) + " cgroup files to join; the zygote takes " +
                                                        std::to_string(kernel_zygote::kMaxCgroupFds)));
  kernel_zygote::Request header;
  header.cgroup_fds = static_cast<uint32_t>(r.cgroup_files.size());
  std::memcpy(header.sandbox, r.sandbox_id.data(), std::min(r.sandbox_id.size(), sizeof header.sandbox - 1));
  std::vector<int> fds = {r.init_pidfd, r.stdout_fd, r.stderr_fd, r.channel};
  for (const auto& f : r.cgroup_files) fds.push_back(f.get());
  if (sys::send_with_fds(connection, &header, sizeof header, fds) != sizeof header)
    return fail(sys_error("send the request to the kernel zygote"));
  // Read by the forked child only: the zygote never holds the environment.
  if (sys::retry_eintr([&] { return ::send(connection, config.data(), config.size(), MSG_NOSIGNAL); }) !=
      static_cast<ssize_t>(config.size()))
    return fail(sys_error("send the kernel's environment"));
  return {};
}

// Until the kernel is forked and holds its filter.
Result<void> await_ready(ZygoteKernel& k) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kZygoteKernelStartTimeoutMs);
  while (!k.pidfd || !k.seccomp_listener) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    pollfd p{k.connection.get(), POLLIN, 0};
    if (left <= 0 || sys::retry_eintr([&] { return ::poll(&p, 1, static_cast<int>(left)); }) == 0)
      return fail(make_error(ErrorCode::kTimeout, "the kernel was not ready within " +
                                                      std::to_string(kZygoteKernelStartTimeoutMs / 1000) + " s of asking the zygote"));
    Reply reply{};
    UniqueFd fd;
    ssize_t n = sys::recv_with_fd(k.connection.get(), &reply, sizeof reply, fd);
    if (n < 0) return fail(sys_error("read the kernel zygote's reply"));
    if (n != sizeof reply) return fail(make_error(ErrorCode::kProtocol, "the kernel zygote went without a reply"));
    reply.message[sizeof reply.message - 1] = '\0';
    switch (reply.kind) {
      case ReplyKind::kForked:
        if (!fd) return fail(make_error(ErrorCode::kProtocol, "the kernel zygote forked without a pidfd"));
        k.host_pid = reply.pid;
        k.pidfd = std::move(fd);
        break;
      case ReplyKind::kReady:
        if (!fd) return fail(make_error(ErrorCode::kProtocol, "the zygote's kernel was ready without a seccomp listener"));
        k.seccomp_listener = std::move(fd);
        break;
      case ReplyKind::kFailed: {
        Error e = make_error(ErrorCode::kInternal, std::string("the kernel zygote: ") + reply.message +
                                                       (reply.error ? std::string(": ") + std::strerror(reply.error) : ""));
        e.sys_errno = reply.error;
        return fail(std::move(e));
      }
      case ReplyKind::kExited:
        return fail(make_error(ErrorCode::kInternal, "the zygote's kernel exited during its set-up (wait status " +
                                                         std::to_string(reply.status) + ")"));
      default:
        return fail(make_error(ErrorCode::kProtocol, "the kernel zygote sent an unknown reply"));
    }
  }
  return {};
}

}  // namespace

Result<ZygoteKernel> start_zygote_kernel(ZygoteKernelRequest request) {
  ZygoteKernel k;
  auto connected = protocol::connect_unix(request.socket, SOCK_SEQPACKET);
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
  if (auto ready = await_ready(k); !ready) {
    if (k.pidfd) (void)::syscall(SYS_pidfd_send_signal, k.pidfd.get(), SIGKILL, nullptr, 0);
    return fail(std::move(ready.error()));
  }
  k.sandbox_pid = sandbox_pid_of(k.host_pid);
  return k;
}

Result<void> ZygoteKernels::adopt(uint64_t id, ZygoteKernel kernel) {
  int listener = kernel.seccomp_listener.get(), connection = kernel.connection.get();
  kernels_[id] = std::move(kernel);
  auto watched = [&]() -> Result<void> {
    NSBOX_CHECK(loop_.add(listener, EPOLLIN, [this, listener](uint32_t) { on_violation_(seccomp::take_violation(listener)); }));
    return loop_.add(connection, EPOLLIN, [this, id](uint32_t) { on_report(id); });
  }();
  if (!watched) {
    signal(id, SIGKILL, true);
    loop_.remove(listener);
    kernels_.erase(id);
  }
  return watched;
}

void ZygoteKernels::signal(uint64_t id, int signal, bool whole_group) {
  auto it = kernels_.find(id);
  if (it == kernels_.end()) return;
  // Until the zygote reports the kernel reaped its pid (and so its group's id) is not
  // reused; the report and a late signal could only cross in the few microseconds
  // between the zygote's waitpid and our reading of its report.
  if (whole_group) ::kill(-it->second.host_pid, signal);
  (void)::syscall(SYS_pidfd_send_signal, it->second.pidfd.get(), signal, nullptr, 0);
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
  for (pollfd p{k.seccomp_listener.get(), POLLIN, 0}; ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN);)
    on_violation_(seccomp::take_violation(k.seccomp_listener.get()));
  for (int fd : {k.seccomp_listener.get(), k.connection.get(), k.pidfd.get()})
    if (fd >= 0) loop_.remove(fd);
  std::optional<int> code, signal;
  if (status && WIFEXITED(*status)) code = WEXITSTATUS(*status);
  if (status && WIFSIGNALED(*status)) signal = WTERMSIG(*status);
  if (!status) signal = SIGKILL;  // ended without the zygote: as the pid namespace's end kills
  on_exit_(id, code, signal);
}

}  // namespace nsbox
