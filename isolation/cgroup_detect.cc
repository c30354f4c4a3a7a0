// Mode detection, mount table parsing and the choice of placement for a new sandbox.
#include <signal.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <linux/magic.h>

#include <cstdlib>
#include <sstream>

#include "isolation/cgroup.h"
#include "isolation/cgroup_drivers.h"
#include "isolation/sys/files.h"
#include "isolation/sys/mountinfo.h"

namespace nsbox::cgroup {

std::string_view mode_name(Mode mode) {
  switch (mode) {
    case Mode::kUnified: return "unified";
    case Mode::kHybrid: return "hybrid";
    case Mode::kLegacy: return "legacy";
  }
  return "legacy";
}

Result<Mode> detect_mode(const std::string& root) {
  struct statfs fs{};
  if (::statfs(root.c_str(), &fs) != 0) return fail(sys_error("statfs " + root));
  if (fs.f_type == CGROUP2_SUPER_MAGIC) return Mode::kUnified;
  if (fs.f_type != TMPFS_MAGIC)
    return fail(make_error(ErrorCode::kUnsupported, root + " is neither cgroup2 nor a tmpfs of v1 hierarchies"));
  struct statfs unified{};
  std::string u = root + "/unified";
  if (::statfs(u.c_str(), &unified) == 0 && unified.f_type == CGROUP2_SUPER_MAGIC) return Mode::kHybrid;
  return Mode::kLegacy;
}

std::string own_v2_path(const std::string& proc_self_cgroup) {
  std::istringstream lines(proc_self_cgroup);
  std::string line;
  while (std::getline(lines, line))
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  return {};
}

uint64_t parse_keyed_value(const std::string& text, std::string_view key) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 && line[key.size()] == ' ')
      return std::stoull(line.substr(key.size() + 1));
  }
  return 0;
}

namespace {

constexpr const char* kNeeded[] = {"memory", "pids", "cpu"};

bool has_option(const std::string& options, std::string_view name) {
  std::istringstream s(options);
  std::string opt;
  while (std::getline(s, opt, ','))
    if (opt == name) return true;
  return false;
}

Result<std::unique_ptr<Driver>> v1_for_new_sandbox(const std::string& id) {
  auto mountinfo = NSBOX_TRY(files::read_file("/proc/self/mountinfo", 4 << 20));
  auto mounts = sys::parse_mountinfo(mountinfo);
  Placement p{"v1", {}, {}};
  for (const char* controller : kNeeded) {
    const sys::MountInfo* found = nullptr;
    for (const auto& m : mounts)
      if (m.fs_type == "cgroup" && has_option(m.super_options, controller)) found = &m;
    if (!found)
      return fail(make_error(ErrorCode::kUnsupported,
                             std::string("no cgroup v1 hierarchy has the ") + controller + " controller",
                             "mount it, or move the host to cgroup v2"));
    if (::access(found->mount_point.c_str(), W_OK) != 0)
      return fail(sys_error("cgroup v1 hierarchy " + found->mount_point + " is not writable")
                      .with_hint("v1 hierarchies cannot be delegated: run as root, or use a "
                                 "cgroup v2 host with a delegated subtree"));
    p.dirs.push_back(found->mount_point + "/nsbox-" + id);
    p.controllers.emplace_back(controller);
  }
  return make_v1_driver(std::move(p));
}

Result<std::unique_ptr<Driver>> v2_for_new_sandbox(const std::string& id) {
  const std::string root = "/sys/fs/cgroup";
  if (::geteuid() == 0) return make_v2_driver(Placement{"v2", {root + "/nsbox-" + id}, {}});
  // Rootless: cgroup v2 only lets us move our own processes between cgroups whose common
  // ancestor we may write. Our own cgroup holds other processes (the shell), so the
  // sandbox's cgroup goes next to it, under our parent, which must be delegated to us.
  auto self = NSBOX_TRY(files::read_file("/proc/self/cgroup"));
  std::string own = own_v2_path(self);
  auto slash = own.rfind('/');
  std::string parent = root + (slash == std::string::npos ? std::string() : own.substr(0, slash));
  if (own.empty() || ::access((parent + "/cgroup.procs").c_str(), W_OK) != 0 ||
      ::access((parent + "/cgroup.subtree_control").c_str(), W_OK) != 0)
    return fail(make_error(ErrorCode::kUnsupported,
                           "no delegated cgroup v2 subtree: " + parent + " is not writable by uid " +
                               std::to_string(::geteuid()),
                           "run nsbox inside a delegated scope, e.g. `systemd-run --user --scope "
                           "-p Delegate=yes nsbox ...`"));
  return make_v2_driver(Placement{"v2", {parent + "/nsbox-" + id}, {}});
}

}  // namespace

Result<std::unique_ptr<Driver>> for_new_sandbox(const std::string& id) {
  Mode mode = NSBOX_TRY(detect_mode());
  if (mode == Mode::kUnified) return v2_for_new_sandbox(id);
  return v1_for_new_sandbox(id);
}

void remove_orphans(const std::string& prefix) {
  auto probe = for_new_sandbox(prefix + "probe");
  if (!probe) return;
  const std::string name_prefix = "nsbox-" + prefix;
  for (const auto& probe_dir : (*probe)->placement().dirs) {
    std::string parent = probe_dir.substr(0, probe_dir.rfind('/'));
    auto names = files::list_dir(parent);
    if (!names) continue;
    for (const auto& name : *names) {
      if (name.rfind(name_prefix, 0) != 0) continue;
      pid_t owner = static_cast<pid_t>(std::strtol(name.c_str() + name_prefix.size(), nullptr, 10));
      if (owner <= 0 || ::kill(owner, 0) == 0 || errno != ESRCH) continue;  // alive (or a reused pid: keep)
      (void)kill_and_remove(parent + "/" + name);
    }
  }
}

std::unique_ptr<Driver> from_placement(const Placement& placement) {
  if (placement.driver == "v2") return make_v2_driver(placement);
  return make_v1_driver(placement);
}

}  // namespace nsbox::cgroup
