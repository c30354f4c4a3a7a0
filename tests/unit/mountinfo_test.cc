// /proc/self/mountinfo as the kernel writes it, escapes included.
#include <catch2/catch.hpp>

#include "isolation/sys/mountinfo.h"

using nsbox::sys::parse_mountinfo;
using nsbox::sys::unescape_mount_field;

TEST_CASE("a mount point with a space, a tab or a backslash is decoded from mountinfo's octal escapes") {
  auto mounts = parse_mountinfo(
      "101 25 0:50 / /tmp/nsbox\\040test/data rw,nosuid shared:7 master:1 - fuse.nsbox-bucketfs nsbox\\011src rw,user_id=0\n"
      "102 25 0:51 /sub\\134dir /mnt/back\\134slash rw - tmpfs tmpfs rw\n");
  REQUIRE(mounts.size() == 2);
  CHECK(mounts[0].mount_point == "/tmp/nsbox test/data");
  CHECK(mounts[0].fs_type == "fuse.nsbox-bucketfs");
  CHECK(mounts[0].source == "nsbox\tsrc");
  CHECK(mounts[0].super_options == "rw,user_id=0");
  CHECK(mounts[1].root == "/sub\\dir");
  CHECK(mounts[1].mount_point == "/mnt/back\\slash");
}

TEST_CASE("what is not an escape stays as it is, and a line without its separator is skipped") {
  CHECK(unescape_mount_field("a\\04b") == "a\\04b");
  CHECK(unescape_mount_field("a\\089") == "a\\089");
  CHECK(unescape_mount_field("end\\") == "end\\");
  CHECK(parse_mountinfo("1 2 0:3 / /x rw shared:1 tmpfs tmpfs rw\n").empty());
}

TEST_CASE("this process's own mounts include its root") {
  auto mounts = nsbox::sys::own_mounts();
  REQUIRE(mounts);
  bool root = false;
  for (const auto& m : *mounts) root = root || m.mount_point == "/";
  CHECK(root);
}
