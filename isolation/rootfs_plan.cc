// What the sandbox sees, step by step (docs/semantics.md, "The sandbox").
#include <fcntl.h>
#include <glob.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <set>
#include <string_view>

#include "isolation/rootfs.h"
#include "isolation/userns.h"
#include "isolation/sys/files.h"
#include "isolation/sys/syscall.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox::rootfs {
namespace {

constexpr unsigned kReadOnly = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
constexpr unsigned kWritable = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;

// The host's system directories. On merged-/usr hosts most are symlinks into /usr and are
// recreated as such. /etc is an overlay of its own (add_etc).
constexpr const char* kHostSystemDirs[] = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"};

// Secrets under /etc that a read-only bind would otherwise show.
constexpr const char* kEtcSecrets[] = {"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
                                       "/etc/ssh/ssh_host_*_key", "/etc/ssl/private"};

// runc's defaults: masked and read-only /proc paths.
constexpr const char* kProcMaskedFiles[] = {"kcore", "keys", "latency_stats", "timer_list",
                                            "timer_stats", "sched_debug", "sysrq-trigger"};
constexpr const char* kProcMaskedDirs[] = {"acpi", "asound", "scsi"};
constexpr const char* kProcReadOnly[] = {"bus", "fs", "irq", "sys"};

constexpr const char* kDevices[] = {"null", "zero", "full", "random", "urandom", "tty"};

std::string size_opt(uint64_t bytes) { return "size=" + std::to_string(bytes); }

// A sticky directory every account writes: owned by kSystemUid when there are accounts
// (its owner could remove anyone's files), else by the mounting user, 1000.
std::string system_owned(const Spec& spec) {
  if (!spec.accounts) return "";
  return ",uid=" + std::to_string(userns::kSystemUid) + ",gid=" + std::to_string(userns::kSystemGid);
}

void add_host_system_dirs(const Spec& spec, std::vector<Step>& steps) {
  for (const char* name : kHostSystemDirs) {
    std::string host = spec.host_root + (spec.host_root.back() == '/' ? "" : "/") + name;
    struct stat st{};
    if (::lstat(host.c_str(), &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      char target[PATH_MAX];
      ssize_t n = ::readlink(host.c_str(), target, sizeof target - 1);
      if (n <= 0) continue;
      steps.push_back({StepKind::kSymlink, std::string(target, static_cast<size_t>(n)), std::string("/") + name});
    } else if (S_ISDIR(st.st_mode)) {
      steps.push_back({StepKind::kBindTree, host, std::string("/") + name, {}, kReadOnly});
    }
  }
}

// /etc: the host's, read-only, under a layer of the sandbox's own (who its user is, its
// hosts, machine-id and resolver), with the host's secrets masked. An overlay, not a bind
// of the host's tree: a mount placed on a bind sits on the host's own dentry, and the
// host replacing that file by rename (useradd rewrites passwd, group, shadow and gshadow
// so) detaches it in every namespace, showing the host's file in every running sandbox.
// The overlay's dentries are the sandbox's: the layer's files and the masks stay whatever
// the host renames beneath them.
void add_etc(const Spec& spec, std::vector<Step>& steps) {
  std::string prefix = spec.host_root == "/" ? "" : spec.host_root;
  struct stat st{};
  if (::stat((prefix + "/etc").c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return;
  Step etc{StepKind::kOverlay, prefix + "/etc", "/etc", {}, kReadOnly};
  // Read here, in the parent: in the child, the root being built hides /tmp, where a
  // sandbox directory may be (as it is for the rootless tests' copy of nsbox).
  auto add_copy = [&](const char* name, const std::string& source) {
    if (auto text = files::read_file(source, 1 << 20)) etc.layer.push_back({name, std::move(*text)});
  };
  for (const char* f : {"passwd", "group", "hosts"}) add_copy(f, spec.sandbox_libexec + "/etc/" + f);
  for (auto& file : etc.layer) {
    if (file.name == "passwd") file.data += spec.passwd_extra;
    if (file.name == "group") file.data += spec.group_extra;
  }
  // The host's machine-id is a stable fingerprint of the host: each sandbox gets one of
  // its own, in the same format (32 lowercase hex digits, a newline). /var, where D-Bus
  // keeps its copy, is not in the sandbox at all.
  etc.layer.push_back({"machine-id", spec.machine_id + "\n"});
  // A NATed sandbox asks its NAT helper's resolver, not the host's (often 127.0.0.53).
  // Others get the host's as it is at the start, copied (as Docker does): it is often a
  // link into /run, which the sandbox does not have, and it must not change later.
  if (!spec.resolv_conf.empty()) etc.layer.push_back({"resolv.conf", spec.resolv_conf});
  else add_copy("resolv.conf", prefix + "/etc/resolv.conf");
  steps.push_back(std::move(etc));
}

// The image's own file `rel` of its tree, read without following a link (the tree is an
// image's: a link in it may point at the host's /etc/shadow); "" when it is not a file.
std::string image_file(const std::string& tree, const std::string& rel) {
  UniqueFd root(::open(tree.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root) return "";
  open_how how{};
  how.flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  UniqueFd fd(static_cast<int>(::syscall(SYS_openat2, root.get(), rel.c_str(), &how, sizeof how)));
  struct stat st{};
  if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return "";
  return files::read_all(fd.get(), 1 << 20, rel).value_or("");
}

// An account file (passwd, group) of the image's with nsbox's accounts in it: the image's
// lines but those that name an account of nsbox's or use one of its ids, then nsbox's.
std::string merged_accounts(const std::string& image_text, const std::string& ours) {
  std::set<std::string> names, ids;
  auto fields = [](const std::string& line) {
    std::vector<std::string> out;
    size_t at = 0;
    for (size_t end; (end = line.find(':', at)) != std::string::npos; at = end + 1) out.push_back(line.substr(at, end - at));
    out.push_back(line.substr(at));
    return out;
  };
  auto each_line = [](const std::string& text, auto&& fn) {
    size_t at = 0;
    while (at < text.size()) {
      size_t end = text.find('\n', at);
      fn(text.substr(at, end == std::string::npos ? std::string::npos : end - at));
      at = end == std::string::npos ? text.size() : end + 1;
    }
  };
  each_line(ours, [&](const std::string& line) {
    auto f = fields(line);
    if (f.size() >= 3 && f[0] != "root" && f[0] != "nobody" && f[0] != "nogroup") {
      names.insert(f[0]);
      ids.insert(f[2]);
    }
  });
  std::string out;
  each_line(image_text, [&](const std::string& line) {
    auto f = fields(line);
    if (f.size() >= 3 && (names.count(f[0]) || ids.count(f[2]))) return;
    if (!line.empty()) out += line + "\n";
  });
  each_line(ours, [&](const std::string& line) {
    auto f = fields(line);
    if (!line.empty() && f.size() >= 3 && f[0] != "root" && f[0] != "nobody" && f[0] != "nogroup") out += line + "\n";
  });
  return out;
}

// An image root's /etc: the image's own, with the sandbox's accounts added to its passwd
// and group, and the sandbox's hosts, machine-id and resolver. Written through the
// overlay at each start (the image is never changed).
void add_image_etc(const Spec& spec, std::vector<Step>& steps) {
  auto ours = [&](const char* name) { return files::read_file(spec.sandbox_libexec + "/etc/" + name, 1 << 20).value_or(""); };
  steps.push_back({StepKind::kFile, {}, "/etc/passwd", merged_accounts(image_file(spec.image_tree, "etc/passwd"), ours("passwd") + spec.passwd_extra)});
  steps.push_back({StepKind::kFile, {}, "/etc/group", merged_accounts(image_file(spec.image_tree, "etc/group"), ours("group") + spec.group_extra)});
  steps.push_back({StepKind::kFile, {}, "/etc/hosts", ours("hosts")});
  steps.push_back({StepKind::kFile, {}, "/etc/machine-id", spec.machine_id + "\n"});
  std::string resolv = spec.resolv_conf.empty() ? files::read_file(spec.host_root == "/" ? "/etc/resolv.conf" : spec.host_root + "/etc/resolv.conf", 1 << 20).value_or("")
                                                : spec.resolv_conf;
  steps.push_back({StepKind::kFile, {}, "/etc/resolv.conf", resolv});
}

void add_etc_masks(const Spec& spec, std::vector<Step>& steps) {
  std::string prefix = spec.host_root == "/" ? "" : spec.host_root;
  for (const char* pattern : kEtcSecrets) {
    glob_t g{};
    if (::glob((prefix + pattern).c_str(), GLOB_NOSORT, nullptr, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) {
        std::string inside = std::string(g.gl_pathv[i]).substr(prefix.size());
        struct stat st{};
        bool dir = ::stat(g.gl_pathv[i], &st) == 0 && S_ISDIR(st.st_mode);
        steps.push_back({dir ? StepKind::kMaskDir : StepKind::kMaskWithNull, {}, inside});
      }
    }
    ::globfree(&g);
  }
}

void add_dev(const Spec& spec, std::vector<Step>& steps) {
  steps.push_back({StepKind::kTmpfs, {}, "/dev", "size=65536,nr_inodes=64,mode=0755",
                   MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC});
  for (const char* d : kDevices)
    steps.push_back({StepKind::kBindTree, std::string("/dev/") + d, std::string("/dev/") + d, {},
                     MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC});
  steps.push_back({StepKind::kDevpts, {}, "/dev/pts", "newinstance,ptmxmode=0666,mode=0620", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC});
  steps.push_back({StepKind::kSymlink, "pts/ptmx", "/dev/ptmx"});
  steps.push_back({StepKind::kSymlink, "/proc/self/fd", "/dev/fd"});
  steps.push_back({StepKind::kSymlink, "/proc/self/fd/0", "/dev/stdin"});
  steps.push_back({StepKind::kSymlink, "/proc/self/fd/1", "/dev/stdout"});
  steps.push_back({StepKind::kSymlink, "/proc/self/fd/2", "/dev/stderr"});
  steps.push_back({StepKind::kTmpfs, {}, "/dev/shm", size_opt(spec.limits.shm_bytes) + ",mode=1777" + system_owned(spec), kWritable});
  steps.push_back({StepKind::kReadOnlyFinal, {}, "/dev"});
}

void add_proc(std::vector<Step>& steps) {
  steps.push_back({StepKind::kProc, {}, "/proc", {}, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC});
  for (const char* f : kProcMaskedFiles) steps.push_back({StepKind::kMaskWithNull, {}, std::string("/proc/") + f, {}, 0, true});
  for (const char* d : kProcMaskedDirs) steps.push_back({StepKind::kMaskDir, {}, std::string("/proc/") + d, {}, 0, true});
  for (const char* p : kProcReadOnly) steps.push_back({StepKind::kReadOnlyAgain, {}, std::string("/proc/") + p, {}, kReadOnly, true});
}

void add_sys(const Spec& spec, std::vector<Step>& steps) {
  // No sysfs: only the sandbox's own cgroup directories, read-only, where a program
  // looking for its limits expects them.
  steps.push_back({StepKind::kTmpfs, {}, "/sys", "size=65536,nr_inodes=64,mode=0755", kReadOnly | MOUNT_ATTR_NOEXEC});
  for (const auto& view : spec.cgroup_views)
    steps.push_back({StepKind::kBindTree, view.host_dir, view.inside, {}, kReadOnly | MOUNT_ATTR_NOEXEC});
  steps.push_back({StepKind::kReadOnlyFinal, {}, "/sys"});
}

}  // namespace

std::string random_machine_id() { return sys::random_hex(16); }

namespace {
// The top-level names of the sandbox's own trees, and of the host's system that a
// workspace must not shadow.
constexpr std::string_view kSystemTops[] = {"bin",  "boot", "dev", "etc", "home", "lib", "lib32", "lib64", "libx32", "media",
                                            "mnt",  "opt",  "proc", "root", "run", "sbin", "srv", "sys", "tmp", "usr", "var"};
constexpr size_t kMaxWorkspaceRoot = 255;
constexpr size_t kMaxWorkspaceDepth = 16;

bool is_under(const std::string& path, const std::string& dir) {
  return path == dir || (path.starts_with(dir) && path.size() > dir.size() && path[dir.size()] == '/');
}
}  // namespace

Result<void> check_workspace_root(const std::string& path) {
  auto refuse = [&](const std::string& why) {
    std::string shown = path.size() > 80 ? path.substr(0, 80) + "..." : path;
    for (char& c : shown)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    return fail(make_error(ErrorCode::kInvalidArgument, "workspace root \"" + shown + "\" " + why,
                           "e.g. /workspace, /app, or a directory under /home/user"));
  };
  if (path.empty() || path.front() != '/') return refuse("is not an absolute path");
  if (path.size() > kMaxWorkspaceRoot) return refuse("is longer than " + std::to_string(kMaxWorkspaceRoot) + " bytes");
  if (path == "/") return refuse("is the sandbox's root");
  size_t depth = 0;
  for (size_t start = 1; start <= path.size(); ++depth) {
    size_t end = std::min(path.find('/', start), path.size());
    std::string_view name(path.data() + start, end - start);
    bool plain = !name.empty() && name != "." && name != ".." && std::all_of(name.begin(), name.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    });
    if (!plain) return refuse("is not a plain path (names of letters, digits, '.', '_' and '-'; no '.', '..', '//' or trailing '/')");
    if (depth == 0 && !is_under(path, kHome) && std::find(std::begin(kSystemTops), std::end(kSystemTops), name) != std::end(kSystemTops))
      return refuse("is in /" + std::string(name) + ", which belongs to the sandbox's system");
    start = end + 1;
  }
  if (depth > kMaxWorkspaceDepth) return refuse("has more than " + std::to_string(kMaxWorkspaceDepth) + " names");
  return {};
}

std::optional<std::string> path_in_home(const std::string& path, const std::string& workspace_root) {
  if (is_under(path, workspace_root)) {
    std::string base = workspace_in_home(workspace_root);
    std::string rest = path.substr(workspace_root.size());  // "" or "/..."
    if (base.empty()) return rest.empty() ? "" : rest.substr(1);
    return base + rest;
  }
  if (is_under(path, kHome)) return path == kHome ? "" : path.substr(std::string(kHome).size() + 1);
  return std::nullopt;
}

std::string workspace_in_home(const std::string& workspace_root) {
  const std::string home = std::string(kHome) + "/";
  if (workspace_root == kHome) return "";
  return workspace_root.starts_with(home) ? workspace_root.substr(home.size()) : kWorkspaceInHome;
}

std::vector<Step> plan(const Spec& spec) {
  std::vector<Step> steps;
  if (!spec.image_tree.empty()) {
    steps.push_back({StepKind::kImageRoot, spec.image_tree, "/", kRootLayerInHome});
    add_image_etc(spec, steps);
    add_dev(spec, steps);
  } else {
    add_host_system_dirs(spec, steps);
    add_etc(spec, steps);
    add_dev(spec, steps);  // before the masks: they bind the sandbox's /dev/null
    add_etc_masks(spec, steps);
  }
  steps.push_back({StepKind::kBindTree, spec.sandbox_libexec, "/opt/nsbox", {}, kReadOnly});
  if (spec.home_volume.empty())  // one-shot sandboxes: nothing to keep
    steps.push_back({StepKind::kTmpfs, {}, "/home/user",
                     size_opt(spec.limits.tmp_bytes) + ",nr_inodes=262144,mode=0755,uid=1000,gid=1000", kWritable});
  else
    steps.push_back({StepKind::kBindTree, spec.home_volume, "/home/user", {}, kWritable});
  // Before the mount points: a bucket may be mounted inside the workspace.
  if (std::string in_home = workspace_in_home(spec.workspace_root); !in_home.empty())
    steps.push_back({StepKind::kWorkspace, in_home, spec.workspace_root, kHome});
  if (spec.shared_workspace) steps.push_back({StepKind::kShared, {}, spec.workspace_root});
  if (!spec.image_tree.empty()) steps.push_back({StepKind::kMaskDir, {}, std::string(kHome) + "/" + kRootLayerInHome});
  for (const auto& home : spec.account_homes) {
    std::string owner = std::to_string(home.uid);
    steps.push_back({StepKind::kTmpfs, {}, home.path,
                     size_opt(spec.limits.tmp_bytes) + ",nr_inodes=65536,mode=0700,uid=" + owner + ",gid=" + owner, kWritable});
  }
  steps.push_back({StepKind::kTmpfs, {}, "/tmp", size_opt(spec.limits.tmp_bytes) + ",nr_inodes=262144,mode=1777" + system_owned(spec),
                   kWritable});
  if (spec.files_attached_later)
    steps.push_back({StepKind::kDir, {}, "/mnt/files"});
  else if (spec.files_volume.empty())  // one-shot sandboxes: nothing to keep
    steps.push_back({StepKind::kTmpfs, {}, "/mnt/files", size_opt(spec.limits.tmp_bytes) + ",mode=0755,uid=1000,gid=1000", kWritable});
  else
    steps.push_back({StepKind::kBindTree, spec.files_volume, "/mnt/files", {}, kWritable});
  for (const auto& dir : spec.mount_points) steps.push_back({StepKind::kDir, {}, dir});
  // The tool bridge's socket: connecting needs no write access to the mount.
  if (!spec.bridge_dir.empty())
    steps.push_back({StepKind::kBindTree, spec.bridge_dir, "/run/nsbox", {}, kReadOnly | MOUNT_ATTR_NOEXEC});
  // pip's offline source (--wheelhouse): read by pip only.
  if (!spec.wheelhouse.empty())
    steps.push_back({StepKind::kBindTree, spec.wheelhouse, "/opt/wheelhouse", {}, kReadOnly | MOUNT_ATTR_NOEXEC});
  add_proc(steps);
  add_sys(spec, steps);
  return steps;
}

}  // namespace nsbox::rootfs
