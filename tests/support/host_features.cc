#include "tests/support/host_features.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <utility>

#include "isolation/sys/files.h"
#include "isolation/sys/syscall.h"
#include "tests/support/nsbox_cli.h"
#include "tests/support/process.h"

namespace nsbox::test {
namespace {

HostFeature present(std::string doctor = {}) { return {true, {}, false, std::move(doctor)}; }
HostFeature absent(std::string why, std::string doctor = {}) { return {false, std::move(why), false, std::move(doctor)}; }

// Under CTest (`make test`, which ran scripts/install-deps first) what it installs must be there.
bool installs_required() {
  const char* policy = std::getenv("NSBOX_TEST_PEERS");
  return policy && std::string(policy) == "required";
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

const HostFeature& i386_syscalls() {
  // The probe's `int $0x80` is getpid (20 on i386): it prints the pid it got back. A CPU
  // or hypervisor without a working i386 entry (or a kernel with ia32_emulation off)
  // kills it with SIGSEGV before any seccomp filter could see the call.
  static const HostFeature feature = [] {
    auto r = run_process({probe_binary(), "int80"}, {.timeout_s = 30});
    if (r.exit_code == 0 && r.out.rfind("int80 returned ", 0) == 0 && std::strtol(r.out.c_str() + 15, nullptr, 10) > 0) return present();
    return absent("`int $0x80` outside any sandbox ended with exit status " + std::to_string(r.exit_code) +
                  (r.out.empty() ? "" : " (" + trimmed(r.out) + ")") + ": this host has no working i386 syscall entry");
  }();
  return feature;
}

const HostFeature& root() {
  static const HostFeature feature =
      ::geteuid() == 0 ? present("root") : absent("not root (uid " + std::to_string(::geteuid()) + ")", "root");
  return feature;
}

HostFeature installed(const std::string& path, const std::string& package) {
  HostFeature f = ::access(path.c_str(), F_OK) == 0
                      ? present()
                      : absent("no " + path + " (Debian's " + package + "; scripts/install-deps installs it)");
  f.required = installs_required();
  return f;
}

const HostFeature& tun_device() {
  static const HostFeature feature = [] {
    struct stat st{};
    if (::stat("/dev/net/tun", &st) != 0 || !S_ISCHR(st.st_mode))
      return absent("no /dev/net/tun character device (modprobe tun)", "/dev/net/tun");
    return present("/dev/net/tun");
  }();
  return feature;
}

const HostFeature& loop_devices() {
  static const HostFeature feature = [] {
    if (::geteuid() != 0) return absent("not root: loop devices need root", "files quotas");
    int fd = ::open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    if (fd < 0) return absent("cannot open /dev/loop-control: " + std::string(std::strerror(errno)), "files quotas");
    ::close(fd);
    return present("files quotas");
  }();
  return feature;
}

const HostFeature& unprivileged_user_namespaces() {
  static const HostFeature feature = [] {
    constexpr const char* kDoctor = "rootless user namespaces";
    auto user = rootless_user();
    if (!user) return absent("no test user nsbox-rootless (the CTest fixture rootless_user_create makes it)", kDoctor);
    auto r = run_process({"/usr/bin/unshare", "--user", "--map-root-user", "true"}, {.timeout_s = 30, .as = user});
    if (r.exit_code == 0) return present(kDoctor);
    std::string why = "an ordinary user cannot create a user namespace (" + trimmed(r.err) + ")";
    if (auto v = files::read_file("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); v && trimmed(*v) == "1")
      why += "; AppArmor restricts them: sysctl kernel.apparmor_restrict_unprivileged_userns=0";
    else if (auto m = files::read_file("/proc/sys/user/max_user_namespaces"); m && trimmed(*m) == "0")
      why += "; sysctl user.max_user_namespaces is 0";
    return absent(why, kDoctor);
  }();
  return feature;
}

const HostFeature& node_peers() {
  static const HostFeature feature = [] {
    namespace fs = std::filesystem;
    fs::path modules = fs::path(NSBOX_SOURCE_DIR) / "tests" / "peers" / "node_modules";
    HostFeature f = present();
    if (!fs::is_regular_file(modules / "s3rver" / "bin" / "s3rver.js") ||
        !fs::is_regular_file(modules / "azurite" / "dist" / "src" / "blob" / "main.js"))
      f = absent(modules.string() + " lacks s3rver or azurite (scripts/install-deps installs them)");
    else if (run_process({"/bin/sh", "-c", "command -v node"}, {.timeout_s = 30}).exit_code != 0)
      f = absent("no `node` on the PATH (scripts/install-deps installs it)");
    f.required = installs_required();
    return f;
  }();
  return feature;
}

const HostFeature& cgroup_limits() {
  static const HostFeature feature = [] {
    auto absent = [](std::string why) { return test::absent(std::move(why), "cgroups"); };
    if (::geteuid() != 0) return absent("not root: root mode's cgroups need root");
    std::string layout = cgroup_layout();
    if (layout.empty()) return absent("/sys/fs/cgroup is neither a cgroup2 mount nor a tmpfs of v1 hierarchies");
    const char* controllers[] = {"memory", "pids", "cpu"};
    if (layout == "unified") {
      std::string available = " " + files::read_file("/sys/fs/cgroup/cgroup.controllers").value_or("") + " ";
      for (auto& c : available)
        if (c == '\n') c = ' ';
      for (const char* c : controllers)
        if (available.find(" " + std::string(c) + " ") == std::string::npos)
          return absent(std::string("the cgroup v2 tree has no ") + c + " controller");
      return present("cgroups");
    }
    for (const char* c : controllers) {
      struct stat st{};
      if (::stat(("/sys/fs/cgroup/" + std::string(c) + "/cgroup.procs").c_str(), &st) != 0)
        return absent(std::string("no cgroup v1 hierarchy with the ") + c + " controller at /sys/fs/cgroup/" + c);
    }
    return present("cgroups");
  }();
  return feature;
}

const HostFeature& fuse_device() {
  static const HostFeature feature = [] {
    struct stat st{};
    if (::stat("/dev/fuse", &st) != 0)
      return absent("no /dev/fuse: " + std::string(std::strerror(errno)) + " (modprobe fuse)", "/dev/fuse");
    if (!S_ISCHR(st.st_mode)) return absent("/dev/fuse is not a character device", "/dev/fuse");
    return present("/dev/fuse");
  }();
  return feature;
}

const HostFeature& kernel_zygote() {
  static const HostFeature feature = [] {
    if (::geteuid() != 0) return absent("not root: the zygote's kernels join their sandboxes as host root", "kernel zygote");
    if (!nsbox::sys::can_signal_process_groups())
      return absent("no pidfd_send_signal to a process group here (PIDFD_SIGNAL_PROCESS_GROUP, Linux 6.9)", "kernel zygote");
    return present("kernel zygote");
  }();
  return feature;
}

const HostFeature& mount_tools() {
  static const HostFeature feature = [] {
    HostFeature f = present();
    for (const char* tool : {"rclone", "s3fs"})
      if (run_process({"/bin/sh", "-c", std::string("command -v ") + tool}, {.timeout_s = 30}).exit_code != 0) {
        f = absent(std::string("no `") + tool + "` on the PATH (apt-get install rclone s3fs; scripts/install-deps installs them)");
        break;
      }
    f.required = installs_required();
    return f;
  }();
  return feature;
}

std::string cgroup_layout() {
  // "36 25 0:32 / /sys/fs/cgroup/memory rw,relatime shared:14 - cgroup cgroup rw,memory":
  // the mount point is the fifth field, the type the first after " - ". A later line for
  // the same point is a mount on top of an earlier one.
  auto text = files::read_file("/proc/self/mountinfo", 16 << 20);
  if (!text) return "";
  std::string top, unified;
  bool v1 = false;
  std::istringstream lines(*text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string field, point;
    for (int i = 0; i < 5 && fields >> field; ++i) point = field;
    while (fields >> field && field != "-") {}
    std::string type;
    if (!(fields >> type)) continue;
    if (point == "/sys/fs/cgroup") top = type;
    if (point == "/sys/fs/cgroup/unified") unified = type;
    if (type == "cgroup" && point.rfind("/sys/fs/cgroup/", 0) == 0) v1 = true;
  }
  if (top == "cgroup2") return "unified";
  if (top != "tmpfs") return "";
  if (unified == "cgroup2") return "hybrid";
  return v1 ? "legacy" : "";
}

namespace {
std::string announced_skip;  // Catch runs test cases one at a time, on the main thread
}  // namespace

void announce_skip(const std::string& reason, const std::string& doctor) {
  announced_skip = (reason.empty() ? "no reason given" : reason) + " [doctor: " + (doctor.empty() ? "none" : doctor) + "]";
}

std::string take_announced_skip() { return std::exchange(announced_skip, {}); }

void announce_partial(const std::string& reason) { std::cout << "PARTIAL: " << reason << std::endl; }

}  // namespace nsbox::test
