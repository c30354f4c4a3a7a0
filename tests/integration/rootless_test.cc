// The rootless subset: the same sandboxes for an ordinary user (created by the test
// fixture), with user namespaces only. Tagged [rootless]: CTest runs them after the
// fixture made the user.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <set>
#include <sstream>

#include "tests/support/nsbox_cli.h"

using namespace nsbox::test;

TEST_CASE("rootless: an ordinary user's sandbox isolates the same way", "[rootless]") {
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

TEST_CASE("rootless: the files API works on a directory volume", "[rootless]") {
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

TEST_CASE("rootless: limits use a delegated cgroup v2 subtree, or fall back to rlimits, said once", "[rootless]") {
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
  for (const auto& c : doctor["checks"]) {
    if (c["name"] == "cgroups") {
      CHECK(c["level"] == "warn");
      CHECK(c["fix"].get<std::string>().size() > 10);
    }
    if (c["name"] == "files quotas") {  // rootless volumes are directories: said, not hidden
      CHECK(c["level"] == "warn");
      CHECK(c["detail"].get<std::string>().find("not enforced") != std::string::npos);
    }
    if (c["name"] == "bucket mounts") CHECK(c["level"] == "warn");  // --mount is refused rootless
  }
}

TEST_CASE("rootless: one-shot run works and leaves nothing", "[rootless]") {
  auto user = rootless_user();
  REQUIRE(user);
  TestRoot root(user);
  auto r = root.nsbox({"run", "--", "/bin/sh", "-c", "id -un; exit 7"});
  INFO(r.err);
  CHECK(r.exit_code == 7);
  CHECK(r.out == "user\n");
}
