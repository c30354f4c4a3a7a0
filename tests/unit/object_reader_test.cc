// The read window of a bucket mount's open file: right bytes across window edges, at
// random offsets and at the end; windows that grow on sequential reads; and a shared
// memory budget that many open files cannot go past. The object store here is an
// in-memory stand-in that counts requests: the real clients are tested against s3rver and
// Azurite (tests/integration).
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "mounts/bucket/object_reader.h"

using namespace nsbox;
using namespace nsbox::bucket;

namespace {

class MemoryBucket final : public BucketClient {
 public:
  explicit MemoryBucket(std::string object) : object_(std::move(object)) {}
  std::atomic<int> reads{0};
  std::atomic<size_t> largest{0};
  std::atomic<uint64_t> requested{0};
  size_t max_per_read = SIZE_MAX;  // a store that answers short

  Result<ListPage> list(const std::string&, bool, const std::string&, int) override { return ListPage{}; }
  Result<std::optional<ObjectHead>> head(const std::string&) override { return std::optional<ObjectHead>(); }
  Result<size_t> read(const std::string&, const std::string& etag, uint64_t offset, char* buffer, size_t length) override {
    ++reads;
    requested += length;
    size_t seen = largest.load();
    while (length > seen && !largest.compare_exchange_weak(seen, length)) {
    }
    if (etag == "stale") return fail(make_error(ErrorCode::kRemote, "412"));
    if (offset >= object_.size()) return size_t{0};
    size_t n = std::min({length, object_.size() - static_cast<size_t>(offset), max_per_read});
    std::memcpy(buffer, object_.data() + offset, n);
    return n;
  }
  Result<std::string> upload(const std::string&, int, uint64_t) override { return std::string(); }
  Result<void> remove(const std::string&) override { return {}; }
  Result<void> copy(const std::string&, const std::string&) override { return {}; }
  Result<void> probe(const std::string&) override { return {}; }
  void stop() override {}

  const std::string& object() const { return object_; }

 private:
  std::string object_;
};

std::string patterned(size_t size) {
  std::string data(size, '\0');
  uint32_t x = 12345;
  for (auto& c : data) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>(x >> 24);
  }
  return data;
}

}  // namespace

TEST_CASE("an open object reads the right bytes sequentially, across windows, at random and at its end") {
  MemoryBucket bucket(patterned((5 << 20) + 12345));
  const std::string& object = bucket.object();
  {
    ObjectReader reader(bucket, "k", "\"etag\"", object.size());
    std::string all;
    for (uint64_t at = 0; at < object.size(); at += 128 << 10) {
      auto got = reader.read(at, 128 << 10);
      REQUIRE(got);
      all += got->bytes;
    }
    CHECK(all == object);
    CHECK(reader.read(object.size(), 4096)->bytes.empty());
    CHECK(reader.read(object.size() - 10, 4096)->bytes == object.substr(object.size() - 10));
    for (uint64_t at : {uint64_t{3} << 20, uint64_t{17}, uint64_t{(2 << 20) - 5}})
      CHECK(reader.read(at, 100000)->bytes == object.substr(at, 100000));
  }
  // 5 MiB read 128 KiB at a time: the windows grow, so a handful of requests, not forty.
  CHECK(bucket.reads < 12);
  CHECK(ObjectReader::budget_in_use() == 0);
}

TEST_CASE("bytes read stay valid while held, after the reader has moved to other windows and closed") {
  MemoryBucket bucket(patterned(8 << 20));
  const std::string& object = bucket.object();
  ReadBytes first, straddling;
  {
    ObjectReader reader(bucket, "k", "\"etag\"", object.size());
    first = *reader.read(0, 4096);  // a view into the first window
    straddling = *reader.read((1 << 20) - 100, 200);  // across the first two windows: copied together
    for (uint64_t at = 1 << 20; at < object.size(); at += 1 << 20) REQUIRE(reader.read(at, 1 << 20));
  }
  CHECK(first.bytes == std::string_view(object).substr(0, 4096));
  CHECK(straddling.bytes == std::string_view(object).substr((1 << 20) - 100, 200));
  CHECK(ObjectReader::budget_in_use() == (1u << 20));  // the first window, held by `first`, still counts
  first = {};
  CHECK(ObjectReader::budget_in_use() == 0);
}

TEST_CASE("a store that answers short, or an object shorter than announced, gives only the bytes it sent") {
  MemoryBucket bucket(patterned((3 << 20) + 777));
  bucket.max_per_read = 100000;  // every window comes back short
  const std::string& object = bucket.object();
  {
    ObjectReader reader(bucket, "k", "\"etag\"", object.size() + (3 << 20));  // announced 3 MiB longer
    std::string all;
    for (uint64_t at = 0; at < object.size() + (3 << 20); at += 128 << 10) {
      auto got = reader.read(at, 128 << 10);
      REQUIRE(got);
      if (at >= object.size()) CHECK(got->bytes.empty());
      all += got->bytes;
    }
    CHECK(all == object);
  }
  CHECK(ObjectReader::budget_in_use() == 0);
}

TEST_CASE("an object replaced since the open fails the read instead of mixing versions") {
  MemoryBucket bucket(patterned(1 << 20));
  ObjectReader reader(bucket, "k", "stale", 1 << 20);
  CHECK_FALSE(reader.read(0, 4096));
}

TEST_CASE("many open files share one read budget: windows stop growing at it, and it is all given back") {
  MemoryBucket bucket(patterned(48 << 20));
  const std::string& object = bucket.object();
  {
    std::vector<std::unique_ptr<ObjectReader>> readers;
    for (int i = 0; i < 24; ++i) readers.push_back(std::make_unique<ObjectReader>(bucket, "k", "\"e\"", object.size()));
    uint64_t peak = 0;
    for (uint64_t at = 0; at < object.size(); at += 1 << 20) {
      for (auto& r : readers) {
        auto got = r->read(at, 1 << 20);
        REQUIRE(got);
        REQUIRE(got->bytes == std::string_view(object).substr(at, 1 << 20));
        peak = std::max(peak, ObjectReader::budget_in_use());
      }
    }
    CHECK(peak <= ObjectReader::kReadBudget);
    CHECK(peak > 0);
    CHECK(bucket.largest > ObjectReader::kFirstWindow);  // windows did grow while there was room
  }
  CHECK(ObjectReader::budget_in_use() == 0);
}

TEST_CASE("thousands of open files reading a page each hold no more than the budget") {
  MemoryBucket bucket(patterned(64 << 20));
  std::vector<std::unique_ptr<ObjectReader>> readers;
  for (int i = 0; i < 400; ++i) {
    readers.push_back(std::make_unique<ObjectReader>(bucket, "k", "\"e\"", bucket.object().size()));
    auto got = readers.back()->read(0, 4096);
    REQUIRE(got);
    REQUIRE(got->bytes == bucket.object().substr(0, 4096));
    CHECK(ObjectReader::budget_in_use() <= ObjectReader::kReadBudget);
  }
  readers.clear();  // waits for what was fetched ahead
  // Without a budget on every window this asked for ~2 GiB (a window and four ahead each).
  CHECK(bucket.requested <= ObjectReader::kReadBudget + 400 * 4096);
  CHECK(ObjectReader::budget_in_use() == 0);
}

