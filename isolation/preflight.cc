#include "isolation/preflight.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "isolation/cgroup.h"
#include "isolation/seccomp_policy.h"
#include "isolation/sys/files.h"

namespace nsbox::preflight {
namespace {

std::string trimmed_file(const std::string& path) {
  auto text = files::read_file(path);
  if (!text) return {};
  while (!text->empty() && (text->back() == '\n' || text->back() == ' ')) text->pop_back();
  return *text;
}

bool rootless() { return ::geteuid() != 0; }

// Actually tries: the sysctls do not tell about every LSM or container restriction.
int try_new_user_namespace() {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(::unshare(CLONE_NEWUSER) == 0 ? 0 : errno);
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A read-only overlay mounted in a new user and mount namespace, as a sandbox's /etc is
// (isolation/rootfs_plan.cc): 0, or the errno that refused it. Tried: the module may load
// on first use, and an LSM may refuse what the kernel allows.
int try_overlay_in_user_namespace() {
  uid_t uid = ::geteuid();
  gid_t gid = ::getegid();
  pid_t pid = ::fork();
  if (pid == 0) {
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) ::_exit(errno);
    (void)files::write_file("/proc/self/setgroups", "deny");
    if (!files::write_file("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1")) ::_exit(EPERM);
    // Without a group map, the mkdirs below fail with EOVERFLOW (our group has no id in
    // the namespace), and the check said no overlay where there was one.
    if (!files::write_file("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1")) ::_exit(EPERM);
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ::_exit(errno);
    if (::mount("tmpfs", "/tmp", "tmpfs", 0, "size=65536") != 0) ::_exit(errno);
    for (const char* d : {"/tmp/a", "/tmp/b", "/tmp/m"})
      if (::mkdir(d, 0755) != 0) ::_exit(errno);
    ::_exit(::mount("overlay", "/tmp/m", "overlay", MS_RDONLY, "lowerdir=/tmp/a:/tmp/b") == 0 ? 0 : errno);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

Check check_kernel() {
  utsname u{};
  ::uname(&u);
  int major = 0, minor = 0;
  std::sscanf(u.release, "%d.%d", &major, &minor);
  bool ok = major > 5 || (major == 5 && minor >= 14);
  return {"kernel", ok ? Level::kOk : Level::kFail, std::string("Linux ") + u.release,
          ok ? "" : "nsbox needs Linux 5.14 or later (mount_setattr, close_range, cgroup.kill); Debian 12 ships 6.1"};
}

Check check_userns() {
  Check c{"user namespaces", Level::kOk, "", ""};
  std::string max = trimmed_file("/proc/sys/user/max_user_namespaces");
  if (max == "0") {
    c.level = Level::kFail;
    c.detail = "user.max_user_namespaces is 0";
    c.fix = "sysctl -w user.max_user_namespaces=15000 (and in /etc/sysctl.d to keep it)";
    return c;
  }
  std::string debian = trimmed_file("/proc/sys/kernel/unprivileged_userns_clone");
  if (rootless() && debian == "0") {
    c.level = Level::kFail;
    c.detail = "kernel.unprivileged_userns_clone is 0";
    c.fix = "sysctl -w kernel.unprivileged_userns_clone=1";
    return c;
  }
  int err = try_new_user_namespace();
  if (err != 0) {
    c.level = Level::kFail;
    c.detail = std::string("unshare(CLONE_NEWUSER) fails: ") + (err > 0 ? std::strerror(err) : "unknown");
    c.fix = "allow user namespaces for this user (sysctls above, AppArmor below, or the container's seccomp profile)";
    return c;
  }
  c.detail = "unshare(CLONE_NEWUSER) works (max " + max + ")";
  return c;
}

Check check_apparmor() {
  std::string v = trimmed_file("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
  if (v.empty()) return {"AppArmor userns restriction", Level::kOk, "not present on this kernel", ""};
  if (v == "0") return {"AppArmor userns restriction", Level::kOk, "off", ""};
  return {"AppArmor userns restriction", rootless() ? Level::kFail : Level::kOk,
          "kernel.apparmor_restrict_unprivileged_userns=1 (namespaces made without privilege get no capabilities)",
          rootless() ? "add an AppArmor profile granting `userns` to nsbox's programs (as /etc/apparmor.d has for other "
                       "container tools), or "
                       "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"
                     : ""};
}

Check check_cgroups() {
  Check c{"cgroups", Level::kOk, "", ""};
  auto mode = cgroup::detect_mode();
  if (!mode) return {"cgroups", Level::kFail, mode.error().message, "mount cgroup2 at /sys/fs/cgroup"};
  c.detail = std::string(cgroup::mode_name(*mode));
  if (*mode == cgroup::Mode::kHybrid) c.detail += " (v1 controllers; cgroup2 at /sys/fs/cgroup/unified)";
  auto driver = cgroup::for_new_sandbox("doctor-probe");
  if (driver) {
    c.detail += "; limits via " + (*driver)->placement().driver + " in " + (*driver)->placement().dirs.front();
    c.detail = c.detail.substr(0, c.detail.rfind('/'));
    return c;
  }
  c.level = Level::kWarn;
  c.detail += "; " + driver.error().message + ": sandboxes fall back to rlimits (memory per process, no CPU limit)";
  c.fix = driver.error().hint;
  return c;
}

Check check_fuse() {
  struct stat st{};
  if (::stat("/dev/fuse", &st) != 0 || !S_ISCHR(st.st_mode))
    return {"/dev/fuse", Level::kWarn, "missing", "bucket mounts need FUSE: apt-get install fuse3 and load the fuse module"};
  int fd = ::open("/dev/fuse", O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return {"/dev/fuse", Level::kWarn, std::string("cannot open: ") + std::strerror(errno),
            "bucket mounts need read-write access to /dev/fuse: chmod 0666 /dev/fuse (what udev does on Debian)"};
  ::close(fd);
  return {"/dev/fuse", Level::kOk, "present and usable", ""};
}

Check check_overlay() {
  int err = try_overlay_in_user_namespace();
  if (err == 0) return {"overlayfs", Level::kOk, "mounts in a user namespace (a sandbox's /etc)", ""};
  return {"overlayfs", Level::kFail,
          "an overlay in a user namespace was refused: " + std::string(err > 0 ? std::strerror(err) : "the probe failed"),
          "a sandbox's /etc is an overlay: load the overlay module (`modprobe overlay`, and overlay in /etc/modules)"};
}

Check check_seccomp() {
  auto p = seccomp::compile();
  if (!p) return {"seccomp", Level::kFail, p.error().message, "install libseccomp2 >= 2.5"};
  return {"seccomp", Level::kOk, "policy compiles to " + std::to_string(p->code.size()) + " BPF instructions", ""};
}

}  // namespace

std::string_view level_name(Level l) {
  switch (l) {
    case Level::kOk: return "ok";
    case Level::kWarn: return "warn";
    case Level::kFail: return "fail";
  }
  return "fail";
}

std::vector<Check> run_all() {
  return {check_kernel(), check_userns(), check_apparmor(), check_cgroups(), check_overlay(), check_fuse(), check_seccomp()};
}

}  // namespace nsbox::preflight
