#include <catch2/catch.hpp>

#include "isolation/cgroup.h"
#include "isolation/sys/mountinfo.h"
#include "tests/support/host_features.h"

using namespace nsbox;

TEST_CASE("mountinfo parsing finds v1 hierarchies with their controllers and the v2 mount") {
  // As on the hybrid build machines: cpu and cpuacct apart, hugetlb-only cgroup2 at unified.
  const char* text =
      "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
      "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime shared:9 - cgroup cgroup rw,cpu\n"
      "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
      "36 31 0:33 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
      "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
      "garbage line\n";
  auto mounts = nsbox::sys::parse_mountinfo(text);
  REQUIRE(mounts.size() == 5);
  CHECK(mounts[1].mount_point == "/sys/fs/cgroup/cpu");
  CHECK(mounts[1].fs_type == "cgroup");
  CHECK(mounts[1].super_options == "rw,cpu");
  CHECK(mounts[3].super_options == "rw,cpu,cpuacct");
  CHECK(mounts[4].fs_type == "cgroup2");
}

TEST_CASE("the v2 line of /proc/self/cgroup gives our own cgroup") {
  CHECK(cgroup::own_v2_path("12:pids:/x\n0::/user.slice/user-1000.slice/session-2.scope\n") ==
        "/user.slice/user-1000.slice/session-2.scope");
  CHECK(cgroup::own_v2_path("4:memory:/a\n").empty());
}

TEST_CASE("keyed cgroup files are read by exact key") {
  const char* oom_control = "oom_kill_disable 0\nunder_oom 0\noom_kill 7\n";
  CHECK(cgroup::parse_keyed_value(oom_control, "oom_kill") == 7);
  CHECK(cgroup::parse_keyed_value(oom_control, "under_oom") == 0);
  CHECK(cgroup::parse_keyed_value("low 0\nhigh 2\nmax 3\noom 1\noom_kill 1\n", "oom") == 1);
  CHECK(cgroup::parse_keyed_value("", "oom_kill") == 0);
}

TEST_CASE("this host's cgroup mode is detected as its mount table shows it") {
  // statfs (nsbox) against /proc/self/mountinfo (the test), two readings of one fact.
  std::string layout = nsbox::test::cgroup_layout();
  INFO("/sys/fs/cgroup per mountinfo: " << layout);
  REQUIRE_FALSE(layout.empty());  // neither v1 nor v2 at /sys/fs/cgroup: no host nsbox supports
  auto mode = cgroup::detect_mode();
  REQUIRE(mode);
  CHECK(cgroup::mode_name(*mode) == layout);
  auto missing = cgroup::detect_mode("/nonexistent-cgroup-root");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message.find("/nonexistent-cgroup-root") != std::string::npos);
}
