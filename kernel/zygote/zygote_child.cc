#include "kernel/zygote/zygote_child.h"

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/rseq.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "isolation/capabilities.h"
#include "isolation/rlimits.h"
#include "isolation/sys/child_fds.h"
#include "isolation/sys/fd_passing.h"
#include "isolation/sys/syscall.h"
#include "isolation/sys/unique_fd.h"
#include "isolation/userns.h"
#include "kernel/zygote/zygote_pages.h"
#include "runtime/protocol/kernel_zygote.h"

namespace nsbox::kernel {
namespace {

constexpr int kSetup = 4;  // where arrange_child_fds puts the set-up socket

[[noreturn]] void child_fail(int socket, const Error& error) {
  kernel_zygote::Reply reply{};
  reply.kind = kernel_zygote::ReplyKind::kFailed;
  reply.error = error.sys_errno;
  std::string text = error.message.substr(0, sizeof reply.message - 1);
  std::memcpy(reply.message, text.data(), text.size());
  (void)sys::send_with_fd(socket, &reply, sizeof reply, -1);
  ::_exit(127);
}

// The kernel's restartable-sequences area registered again. Linux gives a CLONE_VM child
// (the intermediate) none and a fork inherits that, while glibc still believes the main
// thread's area is registered: sched_getcpu() would read the zygote's last CPU for ever,
// and per-CPU code built on rseq would lose its guarantees. Where registering fails, the
// area says so and glibc asks the kernel instead.
void register_rseq() {
  if (__rseq_size == 0) return;  // glibc registered none (glibc.pthread.rseq=0)
  auto* area = reinterpret_cast<struct rseq*>(static_cast<char*>(__builtin_thread_pointer()) + __rseq_offset);
  if (::syscall(SYS_rseq, area, sizeof(struct rseq), 0, RSEQ_SIG) != 0)
    area->cpu_id = static_cast<uint32_t>(RSEQ_CPU_ID_REGISTRATION_FAILED);
}

// The zygote's dispositions are a fresh interpreter's (SIGINT caught, SIGPIPE and SIGXFSZ
// ignored), as an exec'd kernel has them; only its mask (SIGCHLD, for its signalfd) goes.
void unblock_signals() {
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

// /proc/<pid>/cmdline as an exec'd kernel's reads (ps, and whoever counts kernels by it),
// not the zygote's arguments (which name the host's install directory): written over
// them, the rest zeroed. The zygote's arguments are longer than a kernel's.
void name_arguments_as_kernel(std::span<char> arguments) {
  static constexpr char kKernel[] = "/opt/nsbox/nsbox-kernel\0--python-path\0/opt/nsbox/python\0--control-fd\0" "3";
  if (arguments.size() < sizeof kKernel) return;
  std::memcpy(arguments.data(), kKernel, sizeof kKernel);
  std::memset(arguments.data() + sizeof kKernel, 0, arguments.size() - sizeof kKernel);
}

// Nothing of the zygote's but this request's fds (other supervisors' connections, the
// listening socket): the fork's copy of its fd table goes at once.
// No allocation: the intermediate runs in the zygote's memory (zygote_child.h).
void close_all_but(const ChildFds& fds) {
  std::array<int, 9 + kernel_zygote::kMaxCgroupFds> keep{};
  size_t count = 0;
  for (int fd : {0, 1, 2, fds.init_pidfd, fds.stdout_fd, fds.stderr_fd, fds.channel, fds.setup, fds.connection}) keep[count++] = fd;
  for (size_t i = 0; i < fds.cgroup_files.size() && count < keep.size(); ++i) keep[count++] = fds.cgroup_files[i];
  std::sort(keep.begin(), keep.begin() + static_cast<std::ptrdiff_t>(count));
  unsigned next = 0;
  for (size_t i = 0; i < count; ++i) {
    int fd = keep[i];
    if (fd < 0) continue;
    if (static_cast<unsigned>(fd) > next) (void)sys::close_range(next, static_cast<unsigned>(fd) - 1, 0);
    next = std::max(next, static_cast<unsigned>(fd) + 1);
  }
  (void)sys::close_range(next, ~0U, 0);
}

// The supervisor's record: the environment and the preload list, at most kMaxConfigBytes.
// Its size is asked first (MSG_PEEK | MSG_TRUNC says a record's whole length): a buffer
// of the largest size would be 256 fresh pages zeroed, each a fault, for a few KiB.
std::string read_config(int setup) {
  pollfd p{setup, POLLIN, 0};
  if (sys::retry_eintr([&] { return ::poll(&p, 1, 10000); }) != 1) child_fail(setup, make_error(ErrorCode::kTimeout, "no environment from the supervisor within 10 s"));
  ssize_t size = sys::retry_eintr([&] { return ::recv(setup, nullptr, 0, MSG_PEEK | MSG_TRUNC); });
  if (size < 0) child_fail(setup, sys_error("read the environment from the supervisor"));
  if (size == 0) child_fail(setup, make_error(ErrorCode::kProtocol, "the supervisor closed the set-up pair before the environment"));
  if (static_cast<size_t>(size) > kernel_zygote::kMaxConfigBytes)
    child_fail(setup, make_error(ErrorCode::kProtocol, "the environment from the supervisor is " + std::to_string(size) +
                                                            " bytes, over " + std::to_string(kernel_zygote::kMaxConfigBytes)));
  std::string config(static_cast<size_t>(size), '\0');
  ssize_t n = sys::retry_eintr([&] { return ::recv(setup, config.data(), config.size(), 0); });
  if (n < 0) child_fail(setup, sys_error("read the environment from the supervisor"));
  if (n != size)
    child_fail(setup, make_error(ErrorCode::kProtocol, "the environment from the supervisor came short: " + std::to_string(n) +
                                                           " of " + std::to_string(size) + " bytes"));
  return config;
}

// In the kernel, born in the sandbox's namespaces and cgroup as kuid 0 (which nothing in
// the sandbox may signal or trace), in order: not dumpable; its rseq area registered;
// the zygote's connection closed; the cgroup joined; the zygote's pages copied; the
// interpreter's after-fork hook; fds 0 /dev/null, 1-2 the output pipes, 3 the channel, 4
// the set-up pair, nothing else; the environment read; signals unblocked
// (dispositions are a fresh interpreter's, as an exec'd kernel's); its name and cmdline
// an exec'd kernel's; the sandbox user and at once no capability and no_new_privs; a
// session, the rlimits, /home/user, umask 022; the seccomp filter, whose listener goes to
// the supervisor (kReady); the set-up pair closed; dumpable again, last (so that
// /proc/self is its own, as after an exec). A failed step: kFailed on the pair, exit.
std::string become_sandbox_kernel(const ChildFds& fds, const seccomp::Program& program, void (*after_fork)()) {
  // Dumpable (the zygote is), a process of the sandbox's user could write into our memory
  // through /proc once we have that user's ids, before the filter is installed.
  if (::prctl(PR_SET_DUMPABLE, 0) != 0) ::_exit(127);
  register_rseq();
  ::close(fds.connection);
  int setup = fds.setup;
  auto step = [&](Result<void> r) {
    if (!r) child_fail(setup, r.error());
  };
  // The cgroup first, so that what we copy is charged to the sandbox (the intermediate
  // stays out of it: the sandbox's limits must not slow the zygote's side). The pages
  // the fork copied (the zygote's pinned ones: kernel/zygote/zygote_pages.h) are the zygote's
  // cgroup's (docs/design.md, "Kernel zygote").
  for (int file : fds.cgroup_files)
    if (sys::retry_eintr([&] { return ::write(file, "0", 1); }) != 1) child_fail(setup, sys_error("join the sandbox's cgroup"));
  copy_shared_writable_pages();
  // The interpreter's after-fork hook writes to many of its objects: after the copy, so
  // that none of those writes is a copy-on-write fault of its own.
  after_fork();
  if (!sys::arrange_child_fds({-1, fds.stdout_fd, fds.stderr_fd, fds.channel, fds.setup}))
    child_fail(setup, sys_error("arrange the kernel's fds"));
  setup = kSetup;
  std::string config = read_config(setup);
  unblock_signals();
  ::prctl(PR_SET_NAME, "nsbox-kernel");  // as an exec'd kernel is named (ps, top)
  name_arguments_as_kernel(fds.arguments);
  step(userns::become_sandbox_user_keeping_saved_root_in_child());
  // The id change set dumpable from fs.suid_dumpable (1 on some hosts): not dumpable
  // again until the filter holds.
  if (::prctl(PR_SET_DUMPABLE, 0) != 0) child_fail(setup, sys_error("prctl(PR_SET_DUMPABLE, 0)"));
  step(capabilities::drop_all_in_child());  // at once: root is unmapped, so the id change kept them all
  if (::setsid() < 0) child_fail(setup, sys_error("setsid"));
  step(rlimits::apply_in_child(Limits{}, /*as_cgroup_fallback=*/false));
  if (::chdir("/home/user") != 0) child_fail(setup, sys_error("chdir /home/user"));
  ::umask(022);  // as the sandbox's set-up leaves it for init (isolation/rootfs_build.cc)
  if (::prctl(PR_GET_DUMPABLE) != 0) child_fail(setup, make_error(ErrorCode::kInternal, "dumpable before the seccomp filter"));
  auto listener = seccomp::install(program);
  if (!listener) child_fail(setup, listener.error());
  step(userns::drop_saved_root_in_child());
  kernel_zygote::Reply ready{};
  ready.kind = kernel_zygote::ReplyKind::kReady;
  if (sys::send_with_fd(setup, &ready, sizeof ready, *listener) != sizeof ready)
    child_fail(setup, sys_error("send the seccomp listener to the supervisor"));
  ::close(*listener);
  ::close(setup);
  // The change of ids made us not dumpable and no exec comes to make us so again: without
  // this the kernel's /proc/self files would be root's (its mem, environ and fd unreadable
  // to itself), unlike an exec'd kernel's. Last, once the filter holds.
  (void)::prctl(PR_SET_DUMPABLE, 1);
  return config;
}

// The intermediate's failure, said with no allocation: it shares the zygote's heap and
// exits at once, so whatever it allocated would stay there, in every later kernel's copy.
[[noreturn]] void intermediate_fail(int socket, const char* step, int err) {
  kernel_zygote::Reply reply{};
  reply.kind = kernel_zygote::ReplyKind::kFailed;
  reply.error = err;
  const char* why = ::strerrordesc_np(err);
  std::snprintf(reply.message, sizeof reply.message, "%s: %s", step, why ? why : "unknown error");
  (void)sys::send_with_fd(socket, &reply, sizeof reply, -1);
  ::_exit(127);
}

}  // namespace

void make_kernel(const ChildFds& fds, const seccomp::Program& program, pid_t* kernel_pid, void (*after_fork)(),
                 int (*run_kernel)(const std::string& config)) {
  int connection = fds.connection;
  close_all_but(fds);
  constexpr int kNamespaces =
      CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP | CLONE_NEWPID;
  if (::setns(fds.init_pidfd, kNamespaces) != 0) intermediate_fail(connection, "setns(init's pidfd, every namespace)", errno);
  pid_t kernel = ::fork();
  if (kernel == 0) {
    std::string config = become_sandbox_kernel(fds, program, after_fork);
    ::_exit(run_kernel(config));
  }
  if (kernel < 0) intermediate_fail(connection, "fork the kernel", errno);
  UniqueFd pidfd(sys::pidfd_open(kernel, 0));
  if (!pidfd) {
    int err = errno;
    ::kill(kernel, SIGKILL);
    intermediate_fail(connection, "pidfd_open of the kernel", err);
  }
  kernel_zygote::Reply forked{};
  forked.kind = kernel_zygote::ReplyKind::kForked;
  forked.pid = kernel;
  (void)sys::send_with_fd(connection, &forked, sizeof forked, pidfd.get());
  *kernel_pid = kernel;
  ::_exit(0);
}

}  // namespace nsbox::kernel
