// Snapshot members' names and symlink targets, checked before anything is unpacked
// (runtime/archive/tree_archive.h).
#include <catch2/catch.hpp>

#include "runtime/archive/tree_archive.h"

using namespace nsbox::snapshot;

TEST_CASE("member names are made relative and clean, and absolute, '..' and empty names are refused") {
  CHECK(*clean_member_name("a/b") == "a/b");
  CHECK(*clean_member_name("./a//b/") == "a/b");
  CHECK(*clean_member_name("a/./b") == "a/b");
  for (const char* bad : {"", "/", "/etc/passwd", "..", "../x", "a/../../x", "a/..", ".", "./", "//x"}) {
    INFO(bad);
    auto r = clean_member_name(bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().message.find("refused") != std::string::npos);
  }
  CHECK(clean_member_name("../x").error().message.find("'..' in the path") != std::string::npos);
  CHECK(clean_member_name("/x").error().message.find("an absolute path") != std::string::npos);
}

TEST_CASE("a symlink stays inside when its relative target never climbs above the root") {
  CHECK(link_stays_inside("link", "proj/a.py"));
  CHECK(link_stays_inside("a/b/link", "../c"));
  CHECK(link_stays_inside("a/b/link", "../../c"));
  CHECK(link_stays_inside("a/link", "./x/../y"));
  CHECK_FALSE(link_stays_inside("link", "../x"));
  CHECK_FALSE(link_stays_inside("a/link", "../../x"));
  CHECK_FALSE(link_stays_inside("a/link", "x/../../../y"));
  CHECK_FALSE(link_stays_inside("link", "/etc/passwd"));
  CHECK_FALSE(link_stays_inside("link", ""));
}
