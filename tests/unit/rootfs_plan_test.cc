#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "isolation/rootfs.h"

using namespace nsbox;
using rootfs::StepKind;

namespace {

// A fake host: merged /usr (bin, lib as symlinks), /etc with secrets, no /lib32.
struct FakeHost {
  std::string root;
  FakeHost() {
    char tmpl[] = "/tmp/nsbox-test-XXXXXX";
    root = ::mkdtemp(tmpl);
    namespace fs = std::filesystem;
    for (const char* d : {"usr/bin", "usr/lib", "etc/ssh", "root"}) fs::create_directories(root + "/" + d);
    fs::create_symlink("usr/bin", root + "/bin");
    fs::create_symlink("usr/lib", root + "/lib");
    for (const char* f : {"etc/shadow", "etc/gshadow", "etc/passwd", "etc/ssh/ssh_host_ed25519_key",
                          "etc/ssh/ssh_host_ed25519_key.pub"})
      std::ofstream(root + "/" + f) << "x";
  }
  ~FakeHost() { std::filesystem::remove_all(root); }
};

const rootfs::Step* find(const std::vector<rootfs::Step>& steps, const std::string& target, StepKind kind) {
  for (const auto& s : steps)
    if (s.target == target && s.kind == kind) return &s;
  return nullptr;
}

}  // namespace

TEST_CASE("the root binds the host's system directories read-only and recreates /usr symlinks") {
  FakeHost host;
  rootfs::Spec spec{limits_for(SizeTier::kStandard), "/vol", "/libexec", {}, host.root};
  auto steps = rootfs::plan(spec);

  const auto* usr = find(steps, "/usr", StepKind::kBindTree);
  REQUIRE(usr);
  CHECK(usr->source == host.root + "/usr");
  CHECK((usr->attrs & MOUNT_ATTR_RDONLY));
  CHECK((usr->attrs & MOUNT_ATTR_NOSUID));
  const auto* bin = find(steps, "/bin", StepKind::kSymlink);
  REQUIRE(bin);
  CHECK(bin->source == "usr/bin");
  CHECK(find(steps, "/lib32", StepKind::kBindTree) == nullptr);  // absent on the host
  CHECK(find(steps, "/root", StepKind::kBindTree) == nullptr);   // never part of the view
}

TEST_CASE("/etc is an overlay of the host's under the sandbox's own files, with the secrets masked after it") {
  FakeHost host;
  std::filesystem::create_directories(host.root + "/libexec/etc");
  std::ofstream(host.root + "/libexec/etc/passwd") << "the sandbox's passwd";
  std::ofstream(host.root + "/libexec/etc/group") << "the sandbox's group";
  std::ofstream(host.root + "/etc/resolv.conf") << "nameserver 192.0.2.53\n";
  rootfs::Spec spec{limits_for(SizeTier::kStandard), "/vol", host.root + "/libexec", {}, host.root};
  spec.resolv_conf = "nameserver 10.0.2.3\n";
  auto steps = rootfs::plan(spec);
  // Not a bind of the host's tree: masks on one would sit on the host's dentries.
  CHECK_FALSE(find(steps, "/etc", StepKind::kBindTree));
  const auto* etc = find(steps, "/etc", StepKind::kOverlay);
  REQUIRE(etc);
  CHECK(etc->source == host.root + "/etc");
  CHECK((etc->attrs & MOUNT_ATTR_RDONLY));
  std::map<std::string, const rootfs::LayerFile*> layer;
  for (const auto& f : etc->layer) layer[f.name] = &f;
  REQUIRE(layer.count("passwd"));
  CHECK(layer["passwd"]->data == "the sandbox's passwd");
  CHECK(layer["group"]->data == "the sandbox's group");
  CHECK_FALSE(layer.count("hosts"));  // none in this nsbox: the host's shows
  CHECK(layer["machine-id"]->data == spec.machine_id + "\n");
  CHECK(layer["resolv.conf"]->data == spec.resolv_conf);
  spec.resolv_conf.clear();  // not NATed: the host's, copied at the start
  auto plain = rootfs::plan(spec);
  std::string copied;
  for (const auto& f : find(plain, "/etc", StepKind::kOverlay)->layer)
    if (f.name == "resolv.conf") copied = f.data;
  CHECK(copied == "nameserver 192.0.2.53\n");
  for (const char* secret : {"/etc/shadow", "/etc/gshadow", "/etc/ssh/ssh_host_ed25519_key"}) {
    INFO(secret);
    const auto* mask = find(steps, secret, StepKind::kMaskWithNull);
    REQUIRE(mask);
    CHECK(mask > etc);  // on the overlay, so after it
  }
  CHECK_FALSE(find(steps, "/etc/ssh/ssh_host_ed25519_key.pub", StepKind::kMaskWithNull));
  CHECK_FALSE(find(steps, "/etc/passwd", StepKind::kBindTree));
}

TEST_CASE("writable places are size-capped tmpfs, /mnt/files and /home/user are volumes or, for one-shots, tmpfs") {
  FakeHost host;
  Limits limits = limits_for(SizeTier::kLarge);
  rootfs::Spec spec{limits, "/vol/files", "/libexec", {}, host.root};
  auto steps = rootfs::plan(spec);
  const auto* tmp = find(steps, "/tmp", StepKind::kTmpfs);
  REQUIRE(tmp);
  CHECK(tmp->data.find("size=" + std::to_string(limits.tmp_bytes)) != std::string::npos);
  CHECK(tmp->data.find("mode=1777") != std::string::npos);
  const auto* home = find(steps, "/home/user", StepKind::kTmpfs);  // one-shot: nothing kept
  REQUIRE(home);
  CHECK(home->data.find("uid=1000") != std::string::npos);
  CHECK(home->data.find("size=" + std::to_string(limits.tmp_bytes)) != std::string::npos);
  spec.home_volume = "/vol/home";  // a sandbox's own home volume
  auto with_home = rootfs::plan(spec);
  const auto* kept = find(with_home, "/home/user", StepKind::kBindTree);
  REQUIRE(kept);
  CHECK(kept->source == "/vol/home");
  CHECK_FALSE((kept->attrs & MOUNT_ATTR_RDONLY));
  CHECK_FALSE(find(with_home, "/home/user", StepKind::kTmpfs));
  spec.home_volume.clear();
  const auto* files = find(steps, "/mnt/files", StepKind::kBindTree);
  REQUIRE(files);
  CHECK(files->source == "/vol/files");
  CHECK_FALSE((files->attrs & MOUNT_ATTR_RDONLY));

  spec.files_volume.clear();
  CHECK(find(rootfs::plan(spec), "/mnt/files", StepKind::kTmpfs));
  spec.files_attached_later = true;  // an image volume, attached once the sandbox runs
  auto later = rootfs::plan(spec);
  CHECK(find(later, "/mnt/files", StepKind::kDir));
  CHECK_FALSE(find(later, "/mnt/files", StepKind::kTmpfs));
}

TEST_CASE("/proc follows runc's masked and read-only paths, /dev has only the safe nodes") {
  FakeHost host;
  rootfs::Spec spec{limits_for(SizeTier::kStandard), "/vol", "/libexec", {{"/cg/memory/x", "/sys/fs/cgroup/memory"}}, host.root};
  auto steps = rootfs::plan(spec);
  for (const char* f : {"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sysrq-trigger"})
    CHECK(find(steps, f, StepKind::kMaskWithNull));
  CHECK(find(steps, "/proc/acpi", StepKind::kMaskDir));
  CHECK(find(steps, "/proc/sys", StepKind::kReadOnlyAgain));
  int devices = 0;
  for (const auto& s : steps)
    if (s.kind == StepKind::kBindTree && s.target.rfind("/dev/", 0) == 0) ++devices;
  CHECK(devices == 6);  // null zero full random urandom tty
  CHECK(find(steps, "/dev/pts", StepKind::kDevpts));
  const auto* cg = find(steps, "/sys/fs/cgroup/memory", StepKind::kBindTree);
  REQUIRE(cg);
  CHECK((cg->attrs & MOUNT_ATTR_RDONLY));
}

TEST_CASE("the /dev nodes exist before anything is masked with /dev/null") {
  FakeHost host;
  auto steps = rootfs::plan({limits_for(SizeTier::kStandard), "/vol", "/libexec", {}, host.root});
  // Both must be in the plan: a missing /dev/null or no mask at all is not "in order".
  std::optional<size_t> null_at, first_mask;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].target == "/dev/null" && steps[i].kind == StepKind::kBindTree && !null_at) null_at = i;
    if (steps[i].kind == StepKind::kMaskWithNull && !first_mask) first_mask = i;
  }
  REQUIRE(null_at);
  REQUIRE(first_mask);
  CHECK(*null_at < *first_mask);
}

TEST_CASE("a workspace root is a directory of the home bound where it is asked for, before the mount points") {
  FakeHost host;
  rootfs::Spec spec{limits_for(SizeTier::kStandard), "/vol/files", "/libexec", {}, host.root};
  spec.home_volume = "/vol/home";
  auto by_default = rootfs::plan(spec);
  CHECK_FALSE(find(by_default, "/home/user", StepKind::kWorkspace));  // the default: the home itself

  spec.workspace_root = "/workspace";
  spec.mount_points = {"/workspace/data"};
  auto steps = rootfs::plan(spec);
  const auto* ws = find(steps, "/workspace", StepKind::kWorkspace);
  REQUIRE(ws);
  CHECK(ws->source == "workspace");
  CHECK(ws->data == "/home/user");
  auto at = [&](const rootfs::Step* s) { return s - steps.data(); };
  const auto* data = find(steps, "/workspace/data", StepKind::kDir);
  REQUIRE(data);
  CHECK(at(find(steps, "/home/user", StepKind::kBindTree)) < at(ws));
  CHECK(at(ws) < at(data));  // the bucket's mount point is made inside the workspace

  spec.workspace_root = "/home/user/project";
  auto under_home = rootfs::plan(spec);
  const auto* under = find(under_home, "/home/user/project", StepKind::kWorkspace);
  REQUIRE(under);
  CHECK(under->source == "project");
}

TEST_CASE("a workspace root is a plain path outside the sandbox's own trees, and its place in the home is known") {
  for (const char* good : {"/workspace", "/app", "/code/project", "/home/user", "/home/user/a.b/c_d-e", "/srv2"})
    CHECK(rootfs::check_workspace_root(good).has_value());
  const std::pair<std::string, const char*> bad[] = {
      {"", "is not an absolute path"},           {"workspace", "is not an absolute path"},
      {"/", "is the sandbox's root"},            {"/usr/local/w", "is in /usr"},
      {"/home", "is in /home"},                  {"/home/user2", "is in /home"},
      {"/tmp", "is in /tmp"},                    {"/proc/1", "is in /proc"},
      {"/mnt/w", "is in /mnt"},                  {"/opt/w", "is in /opt"},
      {"/w/../etc", "is not a plain path"},      {"/w/./x", "is not a plain path"},
      {"/w//x", "is not a plain path"},          {"/w/", "is not a plain path"},
      {"/w x", "is not a plain path"},           {"/w\nx", "is not a plain path"},
      {"/" + std::string(300, 'a'), "is longer than 255 bytes"},
      {"/a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/q", "has more than 16 names"},
  };
  for (const auto& [path, why] : bad) {
    INFO(path);
    auto r = rootfs::check_workspace_root(path);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().message.find(why) != std::string::npos);
    CHECK(r.error().message.find('\n') == std::string::npos);
  }

  CHECK(rootfs::workspace_in_home("/home/user").empty());
  CHECK(rootfs::workspace_in_home("/home/user/p/q") == "p/q");
  CHECK(rootfs::workspace_in_home("/workspace") == "workspace");
  CHECK(rootfs::path_in_home("/workspace/a/b", "/workspace") == "workspace/a/b");
  CHECK(rootfs::path_in_home("/workspace", "/workspace") == "workspace");
  CHECK(rootfs::path_in_home("/home/user/.cache", "/workspace") == ".cache");
  CHECK(rootfs::path_in_home("/home/user/p/x", "/home/user/p") == "p/x");
  CHECK(rootfs::path_in_home("/home/user", "/home/user") == "");
  CHECK(rootfs::path_in_home("/workspaces", "/workspace") == std::nullopt);
  CHECK(rootfs::path_in_home("/data/x", "/workspace") == std::nullopt);
}

TEST_CASE("an image's tree is the root: none of the host's system, the image's /etc with the sandbox's accounts, its layer masked") {
  FakeHost host;
  namespace fs = std::filesystem;
  fs::create_directories(host.root + "/image/etc");
  std::ofstream(host.root + "/image/etc/passwd") << "root:x:0:0::/root:/bin/sh\nnode:x:1000:1000::/home/node:/bin/sh\napp:x:1001:1001::/app:/bin/sh\n";
  // A link where a file should be is read as no file: never followed to the host's.
  fs::create_symlink(host.root + "/etc/shadow", host.root + "/image/etc/group");
  fs::create_directories(host.root + "/libexec/etc");
  std::ofstream(host.root + "/libexec/etc/passwd") << "root:x:0:0:root:/root:/usr/sbin/nologin\nuser:x:1000:1000::/home/user:/bin/bash\n";
  std::ofstream(host.root + "/libexec/etc/group") << "root:x:0:\nuser:x:1000:\n";
  rootfs::Spec spec;
  spec.host_root = host.root;
  spec.sandbox_libexec = host.root + "/libexec";
  spec.home_volume = "/vol/home";
  spec.image_tree = host.root + "/image";
  auto steps = rootfs::plan(spec);
  REQUIRE(!steps.empty());
  CHECK(steps.front().kind == StepKind::kImageRoot);
  CHECK(steps.front().source == spec.image_tree);
  CHECK(find(steps, "/usr", StepKind::kBindTree) == nullptr);
  CHECK(find(steps, "/etc", StepKind::kOverlay) == nullptr);
  const rootfs::Step* passwd = find(steps, "/etc/passwd", StepKind::kFile);
  REQUIRE(passwd);
  // The image's root and app stay; its user of id 1000 gives way to the sandbox's.
  CHECK(passwd->data == "root:x:0:0::/root:/bin/sh\napp:x:1001:1001::/app:/bin/sh\nuser:x:1000:1000::/home/user:/bin/bash\n");
  const rootfs::Step* group = find(steps, "/etc/group", StepKind::kFile);
  REQUIRE(group);
  CHECK(group->data == "user:x:1000:\n");
  CHECK(find(steps, "/home/user/.nsbox-root", StepKind::kMaskDir));
  CHECK(find(steps, "/home/user", StepKind::kBindTree));
}
