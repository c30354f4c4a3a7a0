#include "isolation/mount_injection.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <iterator>
#include <string_view>

#include "isolation/sys/child_fds.h"
#include "isolation/sys/fd_passing.h"
#include "isolation/sys/syscall.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox::mount_injection {

Result<void> inject(const std::string& source, pid_t sandbox_pid, const std::string& target, unsigned attrs) {
  UniqueFd tree(::open_tree(AT_FDCWD, source.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE));
  if (!tree) return fail(sys_error("open_tree " + source));
  mount_attr attr{};
  attr.attr_set = attrs;
  attr.propagation = MS_PRIVATE;
  if (::mount_setattr(tree.get(), "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr) != 0)
    return fail(sys_error("mount_setattr on the clone of " + source));
  std::string ns_path = "/proc/" + std::to_string(sandbox_pid) + "/ns/mnt";
  UniqueFd ns(::open(ns_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!ns) return fail(sys_error("open " + ns_path));
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return fail(sys_error("pipe2"));
  UniqueFd report_r(report[0]), report_w(report[1]);

  pid_t pid = ::fork();
  if (pid == 0) {
    // setns() into a mount namespace also moves our root and cwd to its root: the target
    // resolves inside the sandbox.
    int err = 0;
    const char* step = "setns into the sandbox's mount namespace";
    if (::setns(ns.get(), CLONE_NEWNS) == 0) {
      step = "move_mount into the sandbox";
      if (::move_mount(tree.get(), "", AT_FDCWD, target.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0) err = errno;
    } else {
      err = errno;
    }
    if (err) {
      char msg[256];
      int n = std::snprintf(msg, sizeof msg, "%s: %s", step, std::strerror(err));
      (void)!::write(report_w.get(), msg, static_cast<size_t>(n));
    }
    ::_exit(err ? 1 : 0);
  }
  report_w.reset();
  if (pid < 0) return fail(sys_error("fork to attach " + source));
  char msg[256] = {};
  ssize_t n = sys::retry_eintr([&] { return ::read(report_r.get(), msg, sizeof msg - 1); });
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (n > 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return fail(make_error(ErrorCode::kSystem, "attach " + source + " at " + target + " in the sandbox: " +
                                                   (n > 0 ? std::string(msg, static_cast<size_t>(n)) : "the helper failed")));
  return {};
}

Result<UniqueFd> mount_fuse_inside(pid_t sandbox_pid, const FuseMount& mount) {
  std::string what = "mount " + mount.source + " at " + mount.target + " in the sandbox";
  std::string proc = "/proc/" + std::to_string(sandbox_pid) + "/ns/";
  UniqueFd user_ns(::open((proc + "user").c_str(), O_RDONLY | O_CLOEXEC));
  if (!user_ns) return fail(sys_error("open " + proc + "user").context(what));
  UniqueFd mount_ns(::open((proc + "mnt").c_str(), O_RDONLY | O_CLOEXEC));
  if (!mount_ns) return fail(sys_error("open " + proc + "mnt").context(what));
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) return fail(sys_error("socketpair").context(what));
  UniqueFd ours(pair[0]), theirs(pair[1]);
  unsigned long flags = MS_NOSUID | MS_NODEV | (mount.read_only ? MS_RDONLY : 0);

  // The child reports a step and an errno (formatted here: it only makes system calls).
  static constexpr const char* kSteps[] = {"setns into the sandbox's user namespace", "open /dev/fuse",
                                           "setns into the sandbox's mount namespace", "mount(fuse)"};
  struct Report {
    int step;  // -1: mounted
    int err;
  };
  pid_t pid = ::fork();
  if (pid == 0) {
    // Single-threaded, as setns into a user namespace wants; holding nothing of the
    // supervisor's but the two namespaces and the socket (as fds 0, 1 and 2).
    if (!sys::arrange_child_fds({user_ns.get(), mount_ns.get(), theirs.get()})) ::_exit(127);
    Report r{0, 0};
    int fuse = -1;
    bool ok = ::setns(0, CLONE_NEWUSER) == 0;
    if (ok) {
      r.step = 1;
      fuse = ::open("/dev/fuse", O_RDWR | O_CLOEXEC);
      ok = fuse >= 0;
    }
    if (ok) {
      // Also moves our root and cwd to the sandbox's: the target resolves inside it.
      r.step = 2;
      ok = ::setns(1, CLONE_NEWNS) == 0;
    }
    if (ok) {
      r.step = 3;
      char options[160];
      std::snprintf(options, sizeof options, "fd=%d,rootmode=40000,user_id=%u,group_id=%u,allow_other,default_permissions",
                    fuse, static_cast<unsigned>(mount.uid), static_cast<unsigned>(mount.gid));
      ok = ::mount(mount.source.c_str(), mount.target.c_str(), "fuse", flags, options) == 0;
    }
    if (ok) r.step = -1;
    else r.err = errno;
    (void)sys::send_with_fd(2, &r, sizeof r, ok ? fuse : -1);
    ::_exit(ok ? 0 : 1);
  }
  theirs.reset();
  if (pid < 0) return fail(sys_error("fork").context(what));
  Report r{-2, 0};
  UniqueFd fuse;
  ssize_t n = sys::retry_eintr([&] { return sys::recv_with_fd(ours.get(), &r, sizeof r, fuse); });
  (void)sys::retry_eintr([&] { return ::waitpid(pid, nullptr, 0); });
  if (n == sizeof r && r.step == -1 && fuse) return fuse;
  if (n == sizeof r && r.step >= 0 && r.step < static_cast<int>(std::size(kSteps)))
    return fail(sys_error(kSteps[r.step], r.err).context(what));
  return fail(make_error(ErrorCode::kSystem, what + ": the helper failed"));
}

}  // namespace nsbox::mount_injection
