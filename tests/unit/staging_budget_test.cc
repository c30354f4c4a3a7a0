// A bucket mount's staging budget: the sizes of its files open for writing (holes
// included) add up to at most `staging_bytes`; how a spec says it, and what it is when a
// spec does not.
#include <catch2/catch.hpp>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <deque>
#include <latch>
#include <thread>
#include <vector>

#include "mounts/bucket/external_helpers.h"
#include "mounts/bucket/mount_spec.h"
#include "mounts/bucket/staging_budget.h"

using namespace nsbox::bucket;

namespace {
constexpr uint64_t kMiB = 1ull << 20;
}

TEST_CASE("a staged file is counted at its size, not at the bytes written, a far byte or a truncate past the budget is EFBIG") {
  StagingBudget budget(64 * kMiB, 5ull << 40);
  StagingBudget::Claim file(budget);
  CHECK(file.cover(200 * kMiB + 1) == EFBIG);  // one byte at 200 MiB: a 200 MiB upload
  CHECK(file.resize(256 * kMiB) == EFBIG);     // truncate(256 MiB)
  CHECK(file.held() == 0);
  CHECK(budget.in_use() == 0);
  CHECK(file.resize(64 * kMiB) == 0);  // exactly the budget fits
  CHECK(budget.in_use() == 64 * kMiB);
  CHECK(file.cover(10) == 0);  // a write inside the file needs nothing more
  CHECK(file.held() == 64 * kMiB);
  CHECK(file.resize(kMiB) == 0);  // shrinking gives back
  CHECK(budget.in_use() == kMiB);
}

TEST_CASE("the files of one mount share its budget: EDQUOT past it, room again when one goes") {
  StagingBudget budget(64 * kMiB, 5ull << 40);
  StagingBudget::Claim a(budget), b(budget);
  CHECK(a.resize(40 * kMiB) == 0);
  CHECK(b.cover(30 * kMiB) == EDQUOT);  // fits alone, not beside a
  CHECK(b.held() == 0);
  CHECK(b.cover(24 * kMiB) == 0);
  CHECK(b.cover(24 * kMiB + 1) == EDQUOT);
  {
    StagingBudget::Claim gone = std::move(a);  // moved: held once, not twice
    CHECK(a.held() == 0);
    CHECK(budget.in_use() == 64 * kMiB);
  }  // the staging file closes
  CHECK(budget.in_use() == 24 * kMiB);
  CHECK(b.cover(60 * kMiB) == 0);
  StagingBudget::Claim c(budget);
  CHECK(c.cover(5 * kMiB) == EDQUOT);
}

TEST_CASE("a file is never larger than the largest object the store takes, whatever the budget") {
  StagingBudget budget(1ull << 50, 5ull << 40);
  CHECK(budget.max_file() == 5ull << 40);
  StagingBudget::Claim file(budget);
  CHECK(file.resize((5ull << 40) + 1) == EFBIG);
  CHECK(file.resize(5ull << 40) == 0);
}

TEST_CASE("claims from many threads never let the budget be overdrawn, and all of it comes back") {
  StagingBudget budget(100 * kMiB, 5ull << 40);
  std::atomic<uint64_t> peak{0};
  // Each thread asks for far more than the budget (claims of up to 29 MiB, five kept at a
  // time), then holds what it got until every thread has asked: together they want 8x the
  // budget, and must have all of it, no more.
  std::latch asked(9), release(1);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      std::deque<StagingBudget::Claim> kept;
      for (int i = 0; i < 2000; ++i) {
        if (kept.size() == 5) kept.pop_front();  // before the next claim, which takes it back
        StagingBudget::Claim c(budget);
        for (uint64_t size = kMiB; size <= 29 * kMiB; size += 7 * kMiB) (void)c.cover(size);
        uint64_t now = budget.in_use(), seen = peak.load();
        while (now > seen && !peak.compare_exchange_weak(seen, now)) {
        }
        kept.push_back(std::move(c));
      }
      asked.count_down();
      release.wait();
    });
  asked.arrive_and_wait();
  uint64_t held = budget.in_use();
  release.count_down();
  for (auto& t : threads) t.join();
  CHECK(peak.load() <= 100 * kMiB);
  CHECK(held > 100 * kMiB - 29 * kMiB);  // the budget filled up, to within one claim's step
  CHECK(budget.in_use() == 0);
}

TEST_CASE("a mount's staging budget is 10 GiB unless its spec says otherwise, and is kept where the mount is stored") {
  auto plain = parse_mount_flag("s3://b:/data:rw");
  REQUIRE(plain);
  CHECK(plain->staging_bytes == 10ull << 30);
  CHECK(plain->to_json()["staging_bytes"] == 10ull << 30);  // shown by inspect, passed to the server

  auto flagged = parse_mount_flag("s3://b/p:/data:rw:staging_bytes=64M");
  REQUIRE(flagged);
  CHECK(flagged->staging_bytes == 64 * kMiB);
  CHECK(flagged->mount_path == "/data");
  CHECK_FALSE(flagged->read_only);
  auto either_order = parse_mount_flag("s3://b:/data:staging_bytes=2G:rw");
  REQUIRE(either_order);
  CHECK(either_order->staging_bytes == 2ull << 30);
  CHECK_FALSE(either_order->read_only);
  auto read_only = parse_mount_flag("gs://b:/data:staging_bytes=1048576");
  REQUIRE(read_only);
  CHECK(read_only->staging_bytes == kMiB);
  CHECK(read_only->read_only);

  auto stored = BucketMount::from_json(flagged->to_json());
  REQUIRE(stored);
  CHECK(stored->staging_bytes == 64 * kMiB);

  auto manifest = parse_manifest(R"([{"type": "s3", "bucket": "b", "mount_path": "/a", "staging_bytes": 134217728},
                                     {"type": "s3", "bucket": "b", "mount_path": "/b", "staging_bytes": "512M"},
                                     {"type": "s3", "bucket": "b", "mount_path": "/c"}])",
                                 "m.json");
  REQUIRE(manifest);
  CHECK((*manifest)[0].staging_bytes == 128 * kMiB);
  CHECK((*manifest)[1].staging_bytes == 512 * kMiB);
  CHECK((*manifest)[2].staging_bytes == kDefaultStagingBytes);
}

TEST_CASE("a staging budget that is no size is refused, naming the field") {
  for (const char* bad : {"0", "512", "1023K", "-5M", "5X", "M", "1.5G", "2P", "99999999999999999999", ""}) {
    INFO(bad);
    auto r = parse_mount_flag(std::string("s3://b:/data:rw:staging_bytes=") + bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().message.find("staging_bytes") != std::string::npos);
  }
  CHECK_FALSE(parse_manifest(R"([{"type": "s3", "bucket": "b", "mount_path": "/a", "staging_bytes": -1}])", "m.json"));
  CHECK_FALSE(parse_manifest(R"([{"type": "s3", "bucket": "b", "mount_path": "/a", "staging_bytes": 1.5e9}])", "m.json"));
  CHECK_FALSE(parse_manifest(R"([{"type": "s3", "bucket": "b", "mount_path": "/a", "staging_bytes": true}])", "m.json"));
  auto twice = parse_mount_flag("s3://b:/data:staging_bytes=1G:staging_bytes=2G");
  REQUIRE_FALSE(twice);
  CHECK(twice.error().message.find("staging_bytes is given twice") != std::string::npos);
  CHECK(parse_staging_bytes("1P").value() == 1ull << 50);
  CHECK(parse_staging_bytes("10GiB").value() == 10ull << 30);
}

TEST_CASE("rclone's cache is capped at the mount's staging budget as well as by the disk") {
  auto m = parse_mount_flag("s3://b:/data:rw:staging_bytes=256M");
  REQUIRE(m);
  m->strategy = MountStrategy::kRclone;
  m->endpoint_url = "http://127.0.0.1:9000";
  HelperPaths paths{"/mnt/x", "/secrets", "/cache", 1000, 1000, 100ull << 30, 1ull << 30};
  auto cmd = helper_command("/usr/bin/rclone", *m, {}, paths);
  REQUIRE(cmd);
  auto at = std::find(cmd->argv.begin(), cmd->argv.end(), "--vfs-cache-max-size");
  REQUIRE(at != cmd->argv.end());
  CHECK(*(at + 1) == "256M");
  paths.cache_max_bytes = 100ull << 20;  // less free disk than budget: the disk bounds it
  cmd = helper_command("/usr/bin/rclone", *m, {}, paths);
  at = std::find(cmd->argv.begin(), cmd->argv.end(), "--vfs-cache-max-size");
  CHECK(*(at + 1) == "100M");
}

TEST_CASE("the staging disk keeps 1 GiB free, or 5 % of a disk larger than 20 GiB") {
  using nsbox::bucket::staging_disk_reserve;
  CHECK(staging_disk_reserve(0) == (1ull << 30));
  CHECK(staging_disk_reserve(1280ull << 20) == (1ull << 30));  // the chaos test's tmpfs
  CHECK(staging_disk_reserve(20ull << 30) == (1ull << 30));
  CHECK(staging_disk_reserve(200ull << 30) == (10ull << 30));
}
