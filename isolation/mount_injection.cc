#include "isolation/mount_injection.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <pthread.h>
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

namespace {

// What the child got to, written into our memory (it shares it).
struct Attach {
  int ns_fd;
  int tree_fd;
  const char* target;
  int step = 0;  // 0 setns, 1 move_mount, 2 attached
  int err = 0;
};

// The child: our memory, but its own root, cwd, namespaces and fd table. Only syscalls:
// no allocation, no lock (we are suspended until it exits; a caller's other threads are
// not). Not instrumented: it runs on a stack AddressSanitizer does not know.
__attribute__((no_sanitize_address)) int attach_in_child(void* arg) {
  auto* a = static_cast<Attach*>(arg);
  // setns() into a mount namespace also moves our root and cwd to its root: the target
  // resolves inside the sandbox.
  if (::setns(a->ns_fd, CLONE_NEWNS) != 0) {
    a->err = errno;
    return 1;
  }
  a->step = 1;
  if (::move_mount(a->tree_fd, "", AT_FDCWD, a->target, MOVE_MOUNT_F_EMPTY_PATH) != 0) {
    a->err = errno;
    return 1;
  }
  a->step = 2;
  return 0;
}

}  // namespace

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

  // CLONE_VM | CLONE_VFORK, as posix_spawn does: no copy of our address space to make, to
  // tear down, or to fault back in (a fork here cost more than the mount), and we wait
  // until the child has exited. Signals stay blocked in it: no handler of ours runs there.
  Attach attach{ns.get(), tree.get(), target.c_str()};
  alignas(16) char stack[16 * 1024];
  sigset_t all, previous;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);
  pid_t pid = ::clone(attach_in_child, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, &attach);
  int clone_err = errno;
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (pid < 0) return fail(sys_error("clone to attach " + source, clone_err));
  int status = 0;
  sys::retry_eintr([&] { return ::waitpid(pid, &status, 0); });
  if (attach.step == 2) return {};
  static constexpr const char* kSteps[] = {"setns into the sandbox's mount namespace", "move_mount into the sandbox"};
  std::string why = attach.err ? std::string(kSteps[attach.step]) + ": " + std::strerror(attach.err)
                               : "the helper died before " + std::string(kSteps[attach.step]);
  return fail(make_error(ErrorCode::kSystem, "attach " + source + " at " + target + " in the sandbox: " + why));
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
