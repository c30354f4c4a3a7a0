#include "isolation/launcher.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "isolation/capabilities.h"
#include "isolation/rlimits.h"
#include "isolation/sys/fd_passing.h"
#include "isolation/sys/syscall.h"
#include "isolation/userns.h"

namespace nsbox::launcher {
namespace {

constexpr int kSetupTimeoutMs = 30000;

// What a failing child sends back.
struct ChildFailure {
  int err;
  char message[1000];
};

[[noreturn]] void child_fail(int sync_fd, const Error& e) {
  ChildFailure f{};
  f.err = e.sys_errno ? e.sys_errno : EINVAL;
  std::strncpy(f.message, e.message.c_str(), sizeof f.message - 1);
  (void)!::write(sync_fd, &f, sizeof f);
  ::_exit(1);
}

Result<void> send_fd(int sock, int fd) {
  char byte = 'L';
  if (sys::send_with_fd(sock, &byte, 1, fd) != 1) return fail(sys_error("send the seccomp listener to the supervisor"));
  return {};
}

std::vector<char*> c_strings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

Result<void> wait_for_go(int sync_fd) {
  char go = 0;
  if (sys::retry_eintr([&] { return ::read(sync_fd, &go, 1); }) != 1 || go != 'G')
    return fail(make_error(ErrorCode::kSandboxDead, "the supervisor went away during setup"));
  return {};
}

Result<void> set_parent_death_signal(int sync_fd) {
  // After the uid change: changing credentials clears PDEATHSIG. Then make sure the parent
  // did not die before we asked (its end of the sync socket would be closed).
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) return fail(sys_error("prctl(PR_SET_PDEATHSIG)"));
  pollfd p{sync_fd, POLLIN, 0};
  if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLIN)))
    return fail(make_error(ErrorCode::kSandboxDead, "the supervisor went away during setup"));
  return {};
}

// Leaves open exactly: 0-2 on /dev/null, the control socket as fd 3 (init only), and the
// fds in `keep` (renumbered above 10, close-on-exec). Every other fd is closed, not just
// marked close-on-exec: a one-shot's pid 1 never execs, and no host fd may reach the
// sandbox (the CVE-2024-21626 class) or stay held open by it.
Result<void> arrange_fds(int control_fd, std::vector<int*> keep) {
  constexpr int kHigh = 10;
  if (control_fd >= 0) keep.push_back(&control_fd);
  for (int* fd : keep)
    if (*fd >= 0 && (*fd = ::fcntl(*fd, F_DUPFD_CLOEXEC, kHigh)) < 0) return fail(sys_error("renumber an fd above 10"));
  UniqueFd null_fd(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!null_fd) return fail(sys_error("open /dev/null in the sandbox"));
  for (int std_fd = 0; std_fd < 3; ++std_fd)
    if (::dup2(null_fd.get(), std_fd) < 0) return fail(sys_error("dup2 /dev/null"));
  null_fd.reset();
  if (control_fd >= 0) {
    if (::dup2(control_fd, kInitControlFd) < 0) return fail(sys_error("dup2 the control socket to fd 3"));
    keep.pop_back();  // its renumbered copy goes with the rest
  }
  std::vector<int> open_fds;
  for (int* fd : keep)
    if (*fd >= 0) open_fds.push_back(*fd);
  std::sort(open_fds.begin(), open_fds.end());
  unsigned next = control_fd >= 0 ? kInitControlFd + 1 : kInitControlFd;
  for (int fd : open_fds) {
    if (static_cast<unsigned>(fd) > next && sys::close_range(next, static_cast<unsigned>(fd) - 1, 0) != 0)
      return fail(sys_error("close_range"));
    next = static_cast<unsigned>(fd) + 1;
  }
  if (sys::close_range(next, ~0U, 0) != 0) return fail(sys_error("close_range"));
  return {};
}

// v1: moves this (single-threaded) process into the sandbox cgroup; see cgroup::Join.
Result<void> join_cgroup(const cgroup::Join& join) {
  for (const auto& fd : join.self_tasks)
    if (sys::retry_eintr([&] { return ::write(fd.get(), "0", 1); }) != 1) return fail(sys_error("join the sandbox cgroup"));
  return {};
}

[[noreturn]] void child_main(const Spec& spec, const std::vector<rootfs::Step>& steps, const cgroup::Join& join,
                             int sync_fd) {  // sync_fd is renumbered by arrange_fds
  auto step = [&](Result<void> r) {
    if (!r) child_fail(sync_fd, r.error());
  };
  step(join_cgroup(join));
  step(wait_for_go(sync_fd));
  if (::unshare(CLONE_NEWCGROUP) != 0) child_fail(sync_fd, sys_error("unshare(CLONE_NEWCGROUP)"));
  auto trees = rootfs::clone_sources_in_child(steps);
  if (!trees) child_fail(sync_fd, trees.error());
  step(userns::become_sandbox_user_in_child());
  if (::sethostname(spec.hostname.data(), spec.hostname.size()) != 0)
    child_fail(sync_fd, sys_error("sethostname " + spec.hostname));
  step(network::setup_in_child(spec.net));
  step(rootfs::build_in_child(steps, *trees, "/tmp"));
  const bool switches_ids = !spec.extra_ids.empty() && !spec.command;
  if (switches_ids) step(userns::become_system_user_in_child());  // before PDEATHSIG: a uid change clears it
  step(set_parent_death_signal(sync_fd));
  if (::setsid() < 0) child_fail(sync_fd, sys_error("setsid"));
  step(rlimits::apply_in_child(spec.limits, spec.cgroup == nullptr));
  std::optional<command_pid1::Command> command = spec.command;
  std::vector<int*> keep = {&sync_fd};
  if (command) keep.insert(keep.end(), {&command->stdin_fd, &command->stdout_fd, &command->stderr_fd});
  step(arrange_fds(spec.control_fd, keep));
  if (::chdir("/home/user") != 0) child_fail(sync_fd, sys_error("chdir /home/user"));
  step(switches_ids ? capabilities::drop_all_but_id_switching_in_child() : capabilities::drop_all_in_child());
  auto listener = seccomp::install(*spec.seccomp);
  if (!listener) child_fail(sync_fd, listener.error());
  step(send_fd(sync_fd, *listener));
  ::close(*listener);
  if (command) command_pid1::run(*command, sync_fd);
  auto argv = c_strings(spec.init_argv);
  auto envp = c_strings(spec.init_env);
  ::execve(spec.init_path.c_str(), argv.data(), envp.data());
  child_fail(sync_fd, sys_error("execve " + spec.init_path));
}

// Reads what the child sends: the listener fd, then EOF once exec succeeded (or, for a
// one-shot command, nothing more: its pid 1 keeps the socket for reports); or a failure.
Result<UniqueFd> await_child(int sync_fd, bool one_shot) {
  UniqueFd listener;
  for (;;) {
    // Bounded: a child stuck in set-up (say, open_tree on a hung network mount) is killed.
    pollfd p{sync_fd, POLLIN, 0};
    int ready = sys::retry_eintr([&] { return ::poll(&p, 1, kSetupTimeoutMs); });
    if (ready == 0) return fail(make_error(ErrorCode::kTimeout, "sandbox setup did not finish within 30 s"));
    ChildFailure f{};
    UniqueFd received;
    ssize_t n = sys::recv_with_fd(sync_fd, &f, sizeof f, received);
    if (n < 0) return fail(sys_error("read from the sandbox during setup"));
    if (n == 0) {
      if (!listener) return fail(make_error(ErrorCode::kInternal, "the sandbox exited during setup without a report"));
      return listener;
    }
    if (received) {
      listener = std::move(received);
      if (one_shot) return listener;
      continue;
    }
    if (static_cast<size_t>(n) == sizeof f) {
      f.message[sizeof f.message - 1] = 0;
      return fail(sys_error("sandbox setup", f.err).context(f.message).context("create sandbox"));
    }
    return fail(make_error(ErrorCode::kInternal, "unexpected message from the sandbox during setup"));
  }
}

uint64_t namespace_flags(const Spec& spec) {
  return CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWIPC | network::clone_flags(spec.net);
}

// clone3 without a stack behaves like fork() (the supervisor is single-threaded); it also
// returns a pidfd and, on cgroup v2, starts the child inside its cgroup.
long clone_sandbox(const Spec& spec, const cgroup::Join& join, int* pidfd) {
  clone_args args{};
  args.flags = namespace_flags(spec) | CLONE_PIDFD;
  args.pidfd = reinterpret_cast<uint64_t>(pidfd);
  args.exit_signal = SIGCHLD;
  if (join.clone_into) {
    args.flags |= CLONE_INTO_CGROUP;
    args.cgroup = static_cast<uint64_t>(join.clone_into.get());
  }
  return ::syscall(SYS_clone3, &args, sizeof args);
}

}  // namespace

Result<Sandbox> launch(const Spec& spec) {
  if (!spec.seccomp) return fail(make_error(ErrorCode::kInternal, "launch without a seccomp program"));
  const std::vector<rootfs::Step> steps = rootfs::plan(spec.rootfs);

  cgroup::Join join;
  if (spec.cgroup) join = NSBOX_TRY(spec.cgroup->open_join());
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return fail(sys_error("socketpair for sandbox setup"));
  UniqueFd parent_end(pair[0]), child_end(pair[1]);

  int pidfd = -1;
  long pid = clone_sandbox(spec, join, &pidfd);
  if (pid < 0) {
    Error e = sys_error("clone3(CLONE_NEWUSER|CLONE_NEWNS|CLONE_NEWPID|...)");
    if (e.sys_errno == EPERM || e.sys_errno == ENOSPC)
      e.hint = "user namespaces may be disabled or restricted; `nsbox doctor` says which and how to fix it";
    return fail(std::move(e));
  }
  if (pid == 0) {
    parent_end.reset();
    child_main(spec, steps, join, child_end.get());
  }
  child_end.reset();
  join = {};

  Sandbox sb;
  sb.init_pid = static_cast<pid_t>(pid);
  sb.pidfd.reset(pidfd);
  auto abort_child = [&](Error e) {
    ::kill(sb.init_pid, SIGKILL);
    ::waitpid(sb.init_pid, nullptr, 0);
    return fail(std::move(e));
  };
  if (auto r = userns::write_maps(sb.init_pid, userns::host_ids(), spec.extra_ids); !r) return abort_child(r.error());
  if (::write(parent_end.get(), "G", 1) != 1) return abort_child(sys_error("start the sandbox setup"));
  if (spec.while_building) spec.while_building();
  auto listener = await_child(parent_end.get(), spec.command.has_value());
  if (!listener) return abort_child(listener.error());
  sb.seccomp_listener = std::move(*listener);
  if (spec.command) sb.reports = std::move(parent_end);
  return sb;
}

}  // namespace nsbox::launcher
