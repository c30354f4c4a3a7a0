// Size tiers hold: pids, memory, tmpfs size, live resize.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <sstream>

#include "tests/support/host_features.h"
#include "tests/support/nsbox_cli.h"

using namespace nsbox::test;

namespace {

// The limits as code inside the sandbox sees them (v1 or v2 layout).
struct SeenLimits {
  std::string memory, pids, cpu;
};

SeenLimits seen(const TestRoot& root, const std::string& id) {
  auto r = root.sh(id,
                   "if [ -d /sys/fs/cgroup/memory ]; then cat /sys/fs/cgroup/memory/memory.limit_in_bytes "
                   "/sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/cpu/cpu.cfs_quota_us; else "
                   "cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/pids.max; cut -d' ' -f1 /sys/fs/cgroup/cpu.max; fi");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  SeenLimits s;
  std::istringstream(r.out) >> s.memory >> s.pids >> s.cpu;
  return s;
}

}  // namespace

TEST_CASE("a fork bomb meets the pids limit: fork fails with EAGAIN and the host stays fine") {
  NSBOX_NEEDS(cgroup_limits());
  TestRoot root;
  auto id = root.create();
  root.install_probe(id);
  auto r = root.sh(id, "/mnt/files/probe fork-bomb", {"--timeout", "120"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  int made = -1;
  char err[32] = {};
  REQUIRE(std::sscanf(r.out.c_str(), "fork %31s after %d processes", err, &made) == 2);
  CHECK(std::string(err) == "EAGAIN");
  CHECK(made < 512);
  CHECK(made > 400);
  // The host forks as before, and the sandbox answers.
  CHECK(run_process({"/bin/true"}).exit_code == 0);
  CHECK(root.sh(id, "echo alive").out == "alive\n");
}

TEST_CASE("a memory bomb is OOM-killed and reported as OOM with the tier's limit") {
  NSBOX_NEEDS(cgroup_limits());
  TestRoot root;
  auto id = root.create();
  root.install_probe(id);
  auto r = root.nsbox({"sh", "--json", id, "--", "/mnt/files/probe", "alloc", "3000"}, {.timeout_s = 120});
  auto j = TestRoot::json(r);
  CHECK(r.exit_code == 137);
  CHECK(j["status"] == "killed");
  CHECK(j["reason"] == "oom");
  CHECK(j["message"] == "killed by the OOM killer: the sandbox's memory limit is 1 GiB (size standard)");
  auto info = TestRoot::json(root.nsbox({"inspect", "--json", id}));
  CHECK(info["oom_kills"].get<int>() >= 1);
  CHECK(info["status"] == "running");  // the sandbox lives on
  CHECK(root.sh(id, "echo alive").out == "alive\n");
}

TEST_CASE("filling /tmp gives ENOSPC at the tier's cap, before memory runs out") {
  TestRoot root;
  auto id = root.create();
  root.install_probe(id);
  auto r = root.sh(id, "/mnt/files/probe fill /tmp/big");
  INFO(r.out << r.err);
  long long written = -1;
  char err[32] = {};
  REQUIRE(std::sscanf(r.out.c_str(), "write %31s after %lld bytes", err, &written) == 2);
  CHECK(std::string(err) == "ENOSPC");
  CHECK(written <= 256ll << 20);
  CHECK(written >= 250ll << 20);
}

TEST_CASE("resize changes the limits seen inside, live, and keeps the sandbox's state") {
  NSBOX_NEEDS(cgroup_limits());
  TestRoot root;
  auto id = root.create();
  auto before = seen(root, id);
  CHECK(before.memory == std::to_string(1ull << 30));
  CHECK(before.pids == "512");
  CHECK(before.cpu == "100000");
  REQUIRE(root.sh(id, "echo kept > /tmp/state").exit_code == 0);

  auto r = root.nsbox({"resize", "--json", id, "--size", "xlarge"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(TestRoot::json(r)["size"] == "xlarge");
  auto after = seen(root, id);
  CHECK(after.memory == std::to_string(8ull << 30));
  CHECK(after.pids == "4096");
  CHECK(after.cpu == "800000");
  CHECK(root.sh(id, "cat /tmp/state").out == "kept\n");

  auto bad = root.nsbox({"resize", id, "--size", "gigantic"});
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("unknown size 'gigantic'") != std::string::npos);
  CHECK(seen(root, id).memory == std::to_string(8ull << 30));
}

TEST_CASE("resizing below the memory in use is refused and the old limits stay") {
  NSBOX_NEEDS(cgroup_limits());
  TestRoot root;
  auto id = root.create({"--size", "large"});
  // 1.15 GiB of tmpfs pages stay charged to the sandbox after the writers exit (/home/user
  // is a volume on disk, not memory).
  auto fill = root.sh(id, "head -c 900M /dev/zero > /tmp/a && head -c 250M /dev/zero > /dev/shm/b; echo $?");
  REQUIRE(fill.out == "0\n");
  auto r = root.nsbox({"resize", id, "--size", "standard"});
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("resize to standard: the sandbox uses 11") != std::string::npos);  // ~1150 MiB
  CHECK(r.err.find("more than the 1 GiB of standard") != std::string::npos);
  CHECK(root.sh(id, "echo alive").out == "alive\n");
  CHECK(seen(root, id).memory == std::to_string(4ull << 30));
  CHECK(TestRoot::json(root.nsbox({"inspect", "--json", id}))["size"] == "large");
}
