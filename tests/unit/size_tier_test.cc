#include <catch2/catch.hpp>

#include "isolation/size_tier.h"

using namespace nsbox;

TEST_CASE("size tiers give the hosted workbench limits: 1/2/4/8 vCPU, GiB and 512..4096 pids") {
  struct Row { const char* name; unsigned vcpus; uint64_t gib; uint64_t pids; };
  for (Row row : {Row{"standard", 1, 1, 512}, Row{"medium", 2, 2, 1024}, Row{"large", 4, 4, 2048}, Row{"xlarge", 8, 8, 4096}}) {
    auto tier = parse_size_tier(row.name);
    REQUIRE(tier);
    CHECK(size_tier_name(*tier) == row.name);
    Limits l = limits_for(*tier);
    CHECK(l.vcpus == row.vcpus);
    CHECK(l.memory_bytes == row.gib << 30);
    CHECK(l.pids == row.pids);
    // tmpfs caps are charged to the same memory (a one-shot's /home/user is a second
    // tmpfs of tmp_bytes), so together they stay below it
    CHECK(2 * l.tmp_bytes + l.shm_bytes < l.memory_bytes);
    CHECK(l.home_bytes == row.gib << 30);  // the home volume's default size, on disk
  }
}

TEST_CASE("an unknown size is refused with the list of sizes") {
  auto tier = parse_size_tier("huge");
  REQUIRE_FALSE(tier);
  CHECK(tier.error().code == ErrorCode::kInvalidArgument);
  CHECK(tier.error().message == "unknown size 'huge'");
  CHECK(tier.error().hint.find("xlarge") != std::string::npos);
  CHECK_FALSE(parse_size_tier(""));
  CHECK_FALSE(parse_size_tier("Standard"));
}

TEST_CASE("byte counts read as people write them") {
  CHECK(format_bytes(1ull << 30) == "1 GiB");
  CHECK(format_bytes(256ull << 20) == "256 MiB");
  CHECK(format_bytes(1000) == "1000 bytes");
}
