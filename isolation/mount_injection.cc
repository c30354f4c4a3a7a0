#include "isolation/mount_injection.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string_view>

#include "isolation/namespace_child.h"
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
  static constexpr const char* kSteps[] = {"setns into the sandbox's user namespace", "open /dev/fuse",
                                           "setns into the sandbox's mount namespace", "mount(fuse)"};
  unsigned long flags = MS_NOSUID | MS_NODEV | (mount.read_only ? MS_RDONLY : 0);
  return namespace_child::make_fd(
      sandbox_pid, {"user", "mnt"}, kSteps,
      [&](namespace_child::Report& r) {
        r.step = 0;
        if (::setns(0, CLONE_NEWUSER) != 0) return -1;
        r.step = 1;
        int fuse = ::open("/dev/fuse", O_RDWR | O_CLOEXEC);  // the host's, before the sandbox's root
        if (fuse < 0) return -1;
        // Also moves our root and cwd to the sandbox's: the target resolves inside it.
        r.step = 2;
        if (::setns(1, CLONE_NEWNS) != 0) return -1;
        r.step = 3;
        char options[160];
        std::snprintf(options, sizeof options, "fd=%d,rootmode=40000,user_id=%u,group_id=%u,allow_other,default_permissions",
                      fuse, static_cast<unsigned>(mount.uid), static_cast<unsigned>(mount.gid));
        if (::mount(mount.source.c_str(), mount.target.c_str(), "fuse", flags, options) != 0) return -1;
        return fuse;
      },
      "mount " + mount.source + " at " + mount.target + " in the sandbox");
}

}  // namespace nsbox::mount_injection
