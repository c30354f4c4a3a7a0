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
  static constexpr const char* kSteps[] = {"setns into the sandbox's mount namespace", "move_mount into the sandbox"};
  return namespace_child::run_sharing_memory(
      sandbox_pid, {"mnt"}, kSteps,
      [&](namespace_child::Report& r, std::span<const int> ns) {
        // setns() into a mount namespace also moves the child's root and cwd to its root:
        // the target resolves inside the sandbox.
        r.step = 0;
        if (::setns(ns[0], CLONE_NEWNS) != 0) return -1;
        r.step = 1;
        return ::move_mount(tree.get(), "", AT_FDCWD, target.c_str(), MOVE_MOUNT_F_EMPTY_PATH);
      },
      "attach " + source + " at " + target + " in the sandbox");
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
