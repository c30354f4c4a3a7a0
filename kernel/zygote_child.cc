#include "kernel/zygote_child.h"

#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <utility>
#include <cstring>
#include <string>

#include "isolation/capabilities.h"
#include "isolation/rlimits.h"
#include "isolation/sys/child_fds.h"
#include "isolation/sys/fd_passing.h"
#include "isolation/sys/syscall.h"
#include "isolation/userns.h"
#include "kernel/private_mappings.h"
#include "runtime/protocol/kernel_zygote.h"

namespace nsbox::kernel {
namespace {

constexpr int kConnection = 4;  // where arrange_child_fds puts it

[[noreturn]] void child_fail(int connection, const Error& error) {
  kernel_zygote::Reply reply{};
  reply.kind = kernel_zygote::ReplyKind::kFailed;
  reply.error = error.sys_errno;
  std::string text = error.message.substr(0, sizeof reply.message - 1);
  std::memcpy(reply.message, text.data(), text.size());
  (void)sys::send_with_fd(connection, &reply, sizeof reply, -1);
  ::_exit(127);
}

constexpr size_t kPage = 4096;
// Larger mappings are reservations (a sanitizer's shadow), never the interpreter's heap:
// they stay copy-on-write.
constexpr size_t kMostCopied = size_t{1} << 30;

// Runs of pages present in [start, start + length), as (first page, count).
std::vector<std::pair<size_t, size_t>> resident_runs(void* start, size_t length) {
  std::vector<unsigned char> present(length / kPage);
  std::vector<std::pair<size_t, size_t>> runs;
  if (::mincore(start, length, present.data()) != 0) return runs;
  for (size_t i = 0; i < present.size();) {
    if (!(present[i] & 1)) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < present.size() && (present[j] & 1)) ++j;
    runs.emplace_back(i, j - i);
    i = j;
  }
  return runs;
}

// Makes every page of the zygote this process can write its own, before anything runs:
// otherwise each is copied on its first write, one fault at a time (Python's reference
// counts write to every object used), and on the VMs measured each such fault with its
// TLB flush (an IPI once the kernel has two threads) cost more than the interpreter's
// start saved (decision 157). MADV_POPULATE_WRITE (Linux >= 5.14; before, the pages stay
// copy-on-write) on the present pages only: the kernel ends no bigger than an exec'd one.
void copy_writable_pages() {
  struct Range {
    void* start;
    size_t length;
  };
  std::vector<Range> ranges;  // all first: the maps file is read as it is
  for_each_private_writable_mapping([&](const Mapping& m) {
    if (m.length <= kMostCopied) ranges.push_back({m.start, m.length});
  });
  for (const auto& r : ranges)
    for (auto [first, count] : resident_runs(r.start, r.length))
      (void)::madvise(static_cast<char*>(r.start) + first * kPage, count * kPage, MADV_POPULATE_WRITE);
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

}  // namespace

int become_sandbox_kernel(const ChildFds& fds, const seccomp::Program& program) {
  int connection = fds.connection;
  auto step = [&](Result<void> r) {
    if (!r) child_fail(connection, r.error());
  };
  copy_writable_pages();
  unblock_signals();
  ::prctl(PR_SET_NAME, "nsbox-kernel");  // as an exec'd kernel is named (ps, top)
  name_arguments_as_kernel(fds.arguments);
  for (int file : fds.cgroup_files)
    if (sys::retry_eintr([&] { return ::write(file, "0", 1); }) != 1) child_fail(connection, sys_error("join the sandbox's cgroup"));
  constexpr int kNamespaces = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP;
  if (::setns(fds.init_pidfd, kNamespaces) != 0) child_fail(connection, sys_error("setns(init's pidfd, every namespace but pid)"));
  // /dev/null is the sandbox's from here on; everything else of the zygote's is closed.
  if (!sys::arrange_child_fds({-1, fds.stdout_fd, fds.stderr_fd, fds.channel, fds.connection}))
    child_fail(connection, sys_error("arrange the kernel's fds"));
  connection = kConnection;
  step(userns::become_sandbox_user_in_child());
  if (::setsid() < 0) child_fail(connection, sys_error("setsid"));
  step(rlimits::apply_in_child(Limits{}, /*as_cgroup_fallback=*/false));
  if (::chdir("/home/user") != 0) child_fail(connection, sys_error("chdir /home/user"));
  ::umask(022);  // as the sandbox's set-up leaves it for init (isolation/rootfs_build.cc)
  step(capabilities::drop_all_in_child());
  // A change of ids made us not dumpable, and no exec comes to make us so again: without
  // this the kernel's /proc/self files would belong to root (its mem, environ and fd
  // unreadable to itself), unlike an exec'd kernel's. After the last change of credentials.
  if (::prctl(PR_SET_DUMPABLE, 1) != 0) child_fail(connection, sys_error("prctl(PR_SET_DUMPABLE)"));
  auto listener = seccomp::install(program);
  if (!listener) child_fail(connection, listener.error());
  kernel_zygote::Reply ready{};
  ready.kind = kernel_zygote::ReplyKind::kReady;
  if (sys::send_with_fd(connection, &ready, sizeof ready, *listener) != sizeof ready)
    child_fail(connection, sys_error("send the seccomp listener to the supervisor"));
  ::close(*listener);
  return connection;
}

}  // namespace nsbox::kernel
