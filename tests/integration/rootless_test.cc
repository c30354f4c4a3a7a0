// The rootless subset: the same sandboxes for an ordinary user (created by the test
// fixture), with user namespaces only. Tagged [rootless]: CTest runs them after the
// fixture made the user.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
#include <set>
#include <sstream>
#include <thread>

#include "isolation/subordinate_ids.h"
#include "isolation/sys/files.h"
#include "tests/support/host_features.h"
#include "tests/support/nsbox_cli.h"
#include "tests/support/object_store_peers.h"

using namespace nsbox::test;

TEST_CASE("rootless: an ordinary user's sandbox isolates the same way", "[rootless]") {
  NSBOX_NEEDS(unprivileged_user_namespaces());
  auto user = rootless_user();
  REQUIRE(user);
  TestRoot root(user);
  auto created = root.nsbox({"create", "--json"});
  INFO(created.err);
  REQUIRE(created.exit_code == 0);
  auto id = TestRoot::json(created)["id"].get<std::string>();
  auto r = root.sh(id, "id -u; grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\\t' ' '; "
                       "unshare --user true 2>&1 | tail -c 24");
  INFO(r.err);
  CHECK(r.out ==
        "1000\nCapEff: 0000000000000000\nCapBnd: 0000000000000000\nNoNewPrivs: 1\nSeccomp: 2\nOperation not permitted\n");
  // Files made inside belong to the invoking user on the host (a rootless volume is a
  // plain directory: no quota without loop devices).
  REQUIRE(root.sh(id, "touch /mnt/files/mine").exit_code == 0);
  auto info = TestRoot::json(root.nsbox({"inspect", "--json", id}));
  CHECK(info["files"]["kind"] == "directory");
  CHECK(info["files"]["quota_bytes"] == 0);
  struct stat st{};
  REQUIRE(::stat((info["files"]["path"].get<std::string>() + "/mine").c_str(), &st) == 0);
  CHECK(st.st_uid == user->uid);
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}

namespace {

// The subordinate range FILE grants the rootless test user (tests/rootless_user gives it
// one where uidmap is installed and the range is free), as nsbox reads it; count 0: none.
nsbox::subids::Range granted(const std::string& file, const RunAs& user) {
  return nsbox::subids::grant_in(nsbox::files::read_file(file).value_or(""), "nsbox-rootless", user.uid);
}

// A request to `nsbox serve`'s socket, by curl: the status line's code, then the body.
std::string api(const std::string& socket, const std::string& token, const std::string& method, const std::string& target,
                const std::string& body = "") {
  std::vector<std::string> argv = {"/usr/bin/curl", "-sS", "--max-time", "60", "--unix-socket", socket, "-X", method, "-H",
                                   "Authorization: Bearer " + token, "-w", "\n%{http_code}", "http://nsbox" + target};
  ProcessOptions o{.timeout_s = 90};
  if (!body.empty()) {
    argv.insert(argv.end(), {"--data-binary", "@-"});
    o.stdin_data = body;
  }
  auto r = run_process(argv, o);
  auto cut = r.out.rfind('\n');
  if (r.exit_code != 0 || cut == std::string::npos) return "curl exited " + std::to_string(r.exit_code) + ": " + r.err;
  return r.out.substr(cut + 1) + " " + r.out.substr(0, cut);
}

}  // namespace

TEST_CASE("rootless: accounts map to the user's subordinate ids, each its own, and what they leave goes with the sandbox",
          "[rootless]") {
  NSBOX_NEEDS(unprivileged_user_namespaces());
  auto user = rootless_user();
  REQUIRE(user);
  TestRoot root(user);
  const uint64_t start = granted("/etc/subuid", *user).start;
  bool helpers = ::access("/usr/bin/newuidmap", X_OK) == 0 && ::access("/usr/bin/newgidmap", X_OK) == 0;
  if (!helpers || granted("/etc/subuid", *user).count < 65536 || granted("/etc/subgid", *user).count < 65536) {
    // What must still hold without them: a refusal that names what is missing, and nothing made.
    auto r = root.nsbox({"create", "--user", "alice"});
    CHECK(r.exit_code != 0);
    INFO(r.err);
    CHECK((r.err.find("no newuidmap") != std::string::npos || r.err.find("grants no subordinate ids") != std::string::npos));
    CHECK(TestRoot::json(root.nsbox({"ls", "--json"}))["sandboxes"].empty());
    announce_partial("no uidmap or no subordinate ids for nsbox-rootless here: only the refusal of accounts was checked");
    return;
  }
  auto created = root.nsbox({"create", "--json", "--user", "alice", "--user", "bob:1500", "--workspace-root", "/workspace"});
  INFO(created.err);
  REQUIRE(created.exit_code == 0);
  auto info = TestRoot::json(created);
  auto id = info["id"].get<std::string>();
  std::string home = TestRoot::json(root.nsbox({"inspect", "--json", id}))["home"]["path"].get<std::string>();
  // Each account's own host id among the grant: inside 999 is its first, 1001 its third.
  auto map = root.sh(id, "id -un; tr -s ' ' < /proc/self/uid_map; echo mine > a.txt; mkdir -m 700 priv; echo s > priv/s",
                     {"--as", "alice"});
  INFO(map.err);
  CHECK(map.out == "alice\n 1000 " + std::to_string(user->uid) + " 1\n 999 " + std::to_string(start) + " 1\n 1001 " +
                       std::to_string(start + 2) + " 1\n 1500 " + std::to_string(start + 501) + " 1\n");
  struct stat st{};
  REQUIRE(::stat((home + "/workspace/a.txt").c_str(), &st) == 0);
  CHECK(st.st_uid == start + 2);
  // One account cannot change or read what the other keeps to itself.
  auto bob = root.sh(id, "id -un; echo theirs >> a.txt || echo refused; cat priv/s || echo unreadable", {"--as", "bob"});
  CHECK(bob.out == "bob\nrefused\nunreadable\n");
  CHECK(root.sh(id, "cat a.txt").out == "mine\n");

  // The fs routes act as the account named, through the sandbox's user namespace.
  std::string socket = root.path() + "/api.sock";
  auto serve = root.start({"serve", "--socket", socket});
  REQUIRE(serve->wait_for_output("token_file", 60));
  std::string said = serve->output();  // "stdout: {the ready line}\n..."
  size_t open = said.rfind('{', said.find("token_file"));
  INFO(said);
  REQUIRE(open != std::string::npos);
  auto ready = nlohmann::json::parse(said.substr(open, said.find('}', open) + 1 - open));
  auto token = nsbox::files::read_file(ready["token_file"].get<std::string>());
  REQUIRE(token);
  std::string t = token->substr(0, token->find('\n'));
  std::string fs = "/v1/sandboxes/" + id + "/fs";
  CHECK(api(socket, t, "GET", fs + "?path=a.txt&run_as=bob") == "200 mine\n");
  auto refused = api(socket, t, "GET", fs + "?path=priv/s&run_as=bob");
  CHECK(refused.starts_with("403 "));
  CHECK(refused.find("not permitted to bob") != std::string::npos);
  CHECK(api(socket, t, "GET", fs + "?path=priv/s&run_as=alice") == "200 s\n");
  CHECK(api(socket, t, "PUT", fs + "?path=priv/new.txt&run_as=bob", "x").starts_with("403 "));
  CHECK(api(socket, t, "PUT", fs + "?path=bobs.txt&run_as=bob", "from bob").starts_with("200 "));
  CHECK(api(socket, t, "GET", fs + ":ls?path=priv&run_as=alice").find("\"s\"") != std::string::npos);
  // A listing made in the child reads as one made here (a name that is not UTF-8 too).
  REQUIRE(root.sh(id, "mkdir odd && touch odd/\"$(printf 'caf\\351')\" 'odd/a b' && echo 12345 > odd/n", {"--as", "alice"}).exit_code == 0);
  auto listed = api(socket, t, "GET", fs + ":ls?path=odd&run_as=alice");
  CHECK(listed.starts_with("200 "));
  CHECK(listed == api(socket, t, "GET", fs + ":ls?path=odd"));
  CHECK(api(socket, t, "POST", fs + ":mkdir?path=bobs-dir&run_as=bob").starts_with("201 "));
  CHECK(root.sh(id, "stat -c '%U %a' bobs.txt bobs-dir").out == "bob 644\nbob 755\n");
  CHECK(api(socket, t, "DELETE", fs + "?path=a.txt&run_as=bob").starts_with("403 "));
  CHECK(api(socket, t, "DELETE", fs + "?path=priv&recursive=true&run_as=alice").starts_with("20"));
  CHECK(root.sh(id, "mkdir -m 700 -p deep/er && echo z > deep/er/z", {"--as", "alice"}).exit_code == 0);
  REQUIRE(serve->signal(SIGTERM));
  CHECK(serve->wait(30).exit_code == 0);

  // Removal reaches what the accounts made (a directory no one else may enter).
  auto removed = root.nsbox({"rm", id});
  INFO(removed.err);
  CHECK(removed.exit_code == 0);
  CHECK(!std::filesystem::exists(home));
}

TEST_CASE("rootless: the files API works on a directory volume", "[rootless]") {
  NSBOX_NEEDS(unprivileged_user_namespaces());
  auto user = rootless_user();
  REQUIRE(user);
  TestRoot root(user);
  auto id = TestRoot::json(root.nsbox({"create", "--json"}))["id"].get<std::string>();
  auto up = root.nsbox({"files", "--json", id, "upload", "-", "in/data.csv"}, {.stdin_data = "a,b\n1,2\n"});
  INFO(up.err);
  REQUIRE(up.exit_code == 0);
  CHECK(TestRoot::json(up)["sha256"] == "492d5ea496056f1a6a6592241032fab764c321596317930b4fa0e1e8bc3b7470");
  CHECK(root.sh(id, "cat /mnt/files/in/data.csv; echo out > /mnt/files/out.txt").out == "a,b\n1,2\n");
  CHECK(root.nsbox({"files", id, "download", "out.txt", "-"}).out == "out\n");
  auto listing = TestRoot::json(root.nsbox({"files", "--json", id, "ls"}));
  std::set<std::string> names;
  for (const auto& e : listing["entries"]) names.insert(e["name"].get<std::string>());
  CHECK(names.count("in"));
  CHECK(names.count("out.txt"));
  CHECK(root.nsbox({"files", id, "rm", "-r", "in"}).exit_code == 0);
  CHECK(root.sh(id, "ls /mnt/files").out == "out.txt\n");
  // Escapes are refused here too: the same openat2 resolution on a plain directory.
  REQUIRE(root.sh(id, "ln -s /etc /mnt/files/etc").exit_code == 0);
  CHECK(root.nsbox({"files", id, "download", "etc/passwd", "-"}).exit_code != 0);
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}

TEST_CASE("rootless: limits use a delegated cgroup v2 subtree, or fall back to rlimits, said once", "[rootless][fuse-mode]") {
  NSBOX_NEEDS(unprivileged_user_namespaces());
  auto user = rootless_user();
  REQUIRE(user);
  TestRoot root(user);
  auto first = root.nsbox({"create", "--json"});
  REQUIRE(first.exit_code == 0);
  auto info = TestRoot::json(first);
  auto id = info["id"].get<std::string>();
  if (info["enforcement"] == "cgroup_v2") {
    // A delegated subtree (the cgroup v2 VM of tests/vm): real limits, no warning.
    CHECK(first.err.find("warning") == std::string::npos);
    auto seen = root.sh(id, "cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/pids.max /sys/fs/cgroup/cpu.max");
    CHECK(seen.out == std::to_string(1ull << 30) + "\n512\n100000 100000\n");
    CHECK(root.nsbox({"resize", id, "--size", "medium"}).exit_code == 0);
    CHECK(root.sh(id, "cat /sys/fs/cgroup/pids.max").out == "1024\n");
    return;
  }
  REQUIRE(info["enforcement"] == "rlimits");
  CHECK(first.err.find("warning: limits fall back to rlimits") != std::string::npos);
  auto second = root.nsbox({"create"});
  REQUIRE(second.exit_code == 0);
  CHECK(second.err.find("warning") == std::string::npos);
  // The fallback still holds memory per process and the process count.
  auto limits = root.sh(id, "ulimit -v; ulimit -u");
  CHECK(limits.out == std::to_string((1ull << 30) / 1024) + "\n512\n");
  auto doctor = TestRoot::json(root.nsbox({"doctor", "--json"}));
  CHECK(doctor["mode"] == "rootless");
  auto check = [&](const std::string& name) {
    for (const auto& c : doctor["checks"])
      if (c["name"] == name) return c;
    FAIL("doctor has no check named '" << name << "': " << doctor.dump());
    return nlohmann::json();
  };
  auto cgroups = check("cgroups");
  CHECK(cgroups["level"] == "warn");
  CHECK(cgroups["fix"].get<std::string>().size() > 10);
  auto quotas = check("files quotas");  // rootless volumes are directories: said, not hidden
  CHECK(quotas["level"] == "warn");
  CHECK(quotas["detail"].get<std::string>().find("not enforced") != std::string::npos);
  // The built-in server only, where /dev/fuse is open to the user.
  auto buckets = check("bucket mounts");
  struct stat fuse{};
  if (::stat("/dev/fuse", &fuse) == 0 && (fuse.st_mode & 0006) == 0006) {
    CHECK(buckets["level"] == "ok");
    CHECK(buckets["detail"].get<std::string>().starts_with("strategies: builtin (rclone and s3fs need root"));
  } else {
    CHECK(buckets["level"] == "warn");
    CHECK(buckets["detail"].get<std::string>().find("/dev/fuse") != std::string::npos);
  }
}

TEST_CASE("rootless: one-shot run works and leaves nothing", "[rootless]") {
  NSBOX_NEEDS(unprivileged_user_namespaces());
  auto user = rootless_user();
  REQUIRE(user);
  TestRoot root(user);
  auto r = root.nsbox({"run", "--", "/bin/sh", "-c", "id -un; exit 7"});
  INFO(r.err);
  CHECK(r.exit_code == 7);
  CHECK(r.out == "user\n");
}

namespace {

// The processes whose executable is under `dir` (by /proc/PID/exe), as "PID PATH".
std::vector<std::string> processes_running_from(const std::string& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code link_ec;
    std::string exe = std::filesystem::read_symlink(e.path() / "exe", link_ec);
    if (!link_ec && exe.rfind(dir, 0) == 0) found.push_back(name + " " + exe);
  }
  return found;
}

// /dev/fuse open to everyone for the test's length, as Debian's udev makes it (0666); a
// host without udev (this one) has the kernel's 0600. Put back as it was when the test
// ends; should the test binary be killed first, the suite's CTest cleanup puts back the
// mode it saved before any test ran (tests/rootless_user fuse-restore).
struct FuseOpenToAll {
  FuseOpenToAll() {
    REQUIRE(::stat("/dev/fuse", &before) == 0);
    REQUIRE(::chmod("/dev/fuse", 0666) == 0);
  }
  ~FuseOpenToAll() { ::chmod("/dev/fuse", before.st_mode & 07777); }
  struct stat before{};
};

}  // namespace

TEST_CASE("rootless: a bucket mounts through the built-in server, mounted from inside the sandbox", "[rootless][s3][fuse-mode]") {
  NSBOX_NEEDS(unprivileged_user_namespaces());
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  auto user = rootless_user();
  REQUIRE(user);
  S3rverPeer s3({"shared"});
  TestRoot root(user);
  const std::string secret = "nsbox-rootless-secret-9c2e51";
  {
    // Where the user cannot open /dev/fuse, create says so, with the fix.
    struct stat st{};
    REQUIRE(::stat("/dev/fuse", &st) == 0);
    if ((st.st_mode & 0006) != 0006) {
      auto refused = root.nsbox({"create", "--mount", "s3://shared:/data"}, {.extra_env = s3_credentials_env(s3, secret)});
      CHECK(refused.exit_code != 0);
      CHECK(refused.err.find("need read and write access to /dev/fuse") != std::string::npos);
      CHECK(refused.err.find("chmod 0666 /dev/fuse") != std::string::npos);
    }
  }
  FuseOpenToAll fuse_open;
  REQUIRE(s3_boto(s3, "s3.put_object(Bucket='shared', Key='in/data.csv', Body=b'a,b\\n1,2\\n')").exit_code == 0);
  auto created = root.nsbox({"create", "--json", "--mount", "s3://shared:/data:rw"}, {.extra_env = s3_credentials_env(s3, secret)});
  INFO(created.err);
  REQUIRE(created.exit_code == 0);
  auto id = TestRoot::json(created)["id"].get<std::string>();
  auto r = root.sh(id, "cat /data/in/data.csv; echo written > /data/out.txt; ls -ln /data | tail -n +2 | awk '{print $3, $4, $NF}'; "
                       "grep -c nsbox-rootless-secret /proc/*/environ 2>/dev/null | grep -vc ':0$'; true");
  INFO(r.err);
  CHECK(r.out == "a,b\n1,2\n1000 1000 in\n1000 1000 out.txt\n0\n");
  CHECK(s3_boto(s3, "sys.stdout.write(s3.get_object(Bucket='shared', Key='out.txt')['Body'].read().decode())").out == "written\n");
  // The sandbox cannot take the mount away: it has no capability in its namespace.
  auto umount = root.sh(id, "python3 -c \"import ctypes\n"
                            "libc = ctypes.CDLL(None, use_errno=True)\n"
                            "print(libc.umount2(b'/data', 2), ctypes.get_errno())\"; cat /data/out.txt");
  INFO(umount.err);
  CHECK(umount.out == "-1 1\nwritten\n");  // EPERM, and still served
  auto server = TestRoot::json(root.nsbox({"inspect", "--json", id}))["mount_servers"][0].get<pid_t>();
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
  CHECK(::kill(server, 0) != 0);  // the server went with the sandbox

  // A bucket that does not exist: create fails with the remote's answer, and leaves
  // neither a sandbox nor a server.
  auto missing = root.nsbox({"create", "--mount", "s3://nosuch:/data"}, {.extra_env = s3_credentials_env(s3, secret)});
  CHECK(missing.exit_code != 0);
  CHECK(missing.err.find("NoSuchBucket") != std::string::npos);
  CHECK(root.nsbox({"ls", "--json"}).out.find("sbx-") == std::string::npos);
  // None of this test's: its programs run from its own copy of the installation (another
  // user of the test account may have servers of its own meanwhile).
  auto left = processes_running_from(root.path() + "/install/");
  for (int i = 0; i < 500 && !left.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    left = processes_running_from(root.path() + "/install/");
  }
  CHECK(left.empty());

  // rclone and s3fs mount through fusermount3, on the host: refused rootless, by name.
  std::string manifest = root.path() + "/manifest.json";
  REQUIRE(nsbox::files::atomic_write(manifest, R"([{"type": "s3", "bucket": "shared", "mount_path": "/data", "strategy": "rclone"}])"));
  REQUIRE(::chmod(manifest.c_str(), 0644) == 0);
  auto helper = root.nsbox({"create", "--manifest", manifest}, {.extra_env = s3_credentials_env(s3, secret)});
  INFO(helper.err);
  CHECK(helper.exit_code != 0);
  CHECK(helper.err.find("the rclone strategy needs nsbox to run as root") != std::string::npos);
  CHECK(root.nsbox({"ls", "--json"}).out.find("sbx-") == std::string::npos);  // nothing left behind
}

TEST_CASE("rootless: with neither --root nor NSBOX_ROOT, state goes to $XDG_RUNTIME_DIR/nsbox and $XDG_DATA_HOME/nsbox",
          "[rootless]") {
  NSBOX_NEEDS(unprivileged_user_namespaces());
  auto user = rootless_user();
  REQUIRE(user);
  TestRoot root(user);  // the user's directories for the test; removed with it
  std::string run = root.path() + "/xdg-run", data = root.path() + "/xdg-data";
  for (const auto& dir : {run, data}) {
    REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
    REQUIRE(::chown(dir.c_str(), user->uid, user->gid) == 0);
  }
  // `root.nsbox` would pass --root: the installed copy, run directly.
  std::string nsbox = root.path() + "/install/bin/nsbox";
  const ProcessOptions env{.as = user, .extra_env = {"NSBOX_ROOT=", "XDG_RUNTIME_DIR=" + run, "XDG_DATA_HOME=" + data}};
  struct RemoveAtEnd {  // the sandbox is not under root.path()'s own state: its destructor would miss it
    std::function<void()> remove;
    ~RemoveAtEnd() { remove(); }
  } at_end{[&] {
    auto ls = nlohmann::json::parse(run_process({nsbox, "ls", "--json"}, env).out, nullptr, false);
    if (!ls.is_discarded())
      for (const auto& sb : ls.value("sandboxes", nlohmann::json::array())) run_process({nsbox, "rm", sb.value("id", "")}, env);
  }};
  auto created = run_process({nsbox, "create", "--json"}, env);
  INFO(created.err);
  REQUIRE(created.exit_code == 0);
  std::string id = TestRoot::json(created)["id"];
  CHECK(nsbox::files::exists(run + "/nsbox/sandboxes/" + id + "/state.json"));
  auto info = TestRoot::json(run_process({nsbox, "inspect", "--json", id}, env));
  CHECK(info["files"]["path"].get<std::string>().rfind(data + "/nsbox/volumes/", 0) == 0);
  CHECK(run_process({nsbox, "sh", id, "--", "echo here"}, env).out == "here\n");
  CHECK(run_process({nsbox, "rm", id}, env).exit_code == 0);
  CHECK_FALSE(nsbox::files::exists(run + "/nsbox/sandboxes/" + id));
}
