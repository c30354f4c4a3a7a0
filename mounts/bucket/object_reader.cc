#include "mounts/bucket/object_reader.h"

#include <algorithm>
#include <atomic>
#include <cstring>

namespace nsbox::bucket {
namespace {

std::atomic<uint64_t> g_leased{0};
std::atomic<int> g_fetching_ahead{0};  // threads of background fetches, all readers

bool try_lease(uint64_t bytes) {
  uint64_t used = g_leased.load();
  while (used + bytes <= ObjectReader::kReadBudget)
    if (g_leased.compare_exchange_weak(used, used + bytes)) return true;
  return false;
}

}  // namespace

ObjectReader::Lease& ObjectReader::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    g_leased -= bytes_;
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

ObjectReader::Lease::~Lease() { g_leased -= bytes_; }

uint64_t ObjectReader::budget_in_use() { return g_leased.load(); }

ObjectReader::ObjectReader(BucketClient& client, std::string key, std::string etag, uint64_t size)
    : client_(client), key_(std::move(key)), etag_(std::move(etag)), size_(size) {}

ObjectReader::~ObjectReader() = default;  // futures of std::async wait for their fetch

Result<ObjectReader::Chunk> ObjectReader::fetch(uint64_t offset, size_t length, Lease lease) {
  auto window = std::make_shared<Window>(std::make_unique_for_overwrite<char[]>(length), std::move(lease));
  size_t got = NSBOX_TRY(client_.read(key_, etag_, offset, window->bytes.get(), length));
  return Chunk{offset, std::move(window), got};
}

// Makes current_ cover `offset`: from the windows fetched ahead when they are the right
// ones (those before it are dropped), otherwise with a request now.
Result<void> ObjectReader::load_chunk_at(uint64_t offset, size_t at_least) {
  while (!ahead_.empty()) {
    Pending next = std::move(ahead_.front());
    ahead_.pop_front();
    if (offset < next.offset || offset >= next.offset + next.length) continue;  // waited for and dropped
    auto chunk = next.chunk.get();
    if (!chunk) return fail(std::move(chunk.error()));
    if (!chunk->covers(offset)) continue;  // cut short by the budget: fetch the rest now
    current_ = std::move(*chunk);
    return {};
  }
  bool sequential = offset == expected_next_;
  window_ = sequential ? window_ : kFirstWindow;
  uint64_t left = size_ - offset;
  size_t length = static_cast<size_t>(std::min<uint64_t>(std::max(window_, at_least), left));
  if (try_lease(length)) {
    current_ = NSBOX_TRY(fetch(offset, length, Lease(length)));
  } else {
    // No budget left: only what was asked for, kept no longer than this read.
    length = static_cast<size_t>(std::min<uint64_t>(at_least, left));
    current_ = NSBOX_TRY(fetch(offset, length, Lease()));
  }
  scheduled_end_ = current_.offset + current_.size;
  return {};
}

void ObjectReader::prefetch() {
  scheduled_end_ = std::max(scheduled_end_, current_.offset + current_.size);
  while (ahead_.size() < kAhead && scheduled_end_ < size_) {
    size_t window = std::min(window_ * 2, kMaxWindow);
    uint64_t from = scheduled_end_;
    size_t length = static_cast<size_t>(std::min<uint64_t>(window, size_ - from));
    // Memory and threads first: without both, the kernel's reads fetch as they come.
    if (g_fetching_ahead.fetch_add(1) >= kMaxFetchingAhead) {
      --g_fetching_ahead;
      return;
    }
    if (!try_lease(length)) {
      --g_fetching_ahead;
      return;
    }
    window_ = window;
    ahead_.push_back({from, length, std::async(std::launch::async, [this, from, length] {
                        auto chunk = fetch(from, length, Lease(length));
                        --g_fetching_ahead;
                        return chunk;
                      })});
    scheduled_end_ += length;
  }
}

Result<ReadBytes> ObjectReader::read(uint64_t offset, size_t length) {
  if (offset >= size_) return ReadBytes{};
  length = static_cast<size_t>(std::min<uint64_t>(length, size_ - offset));
  bool sequential = offset == expected_next_;
  ReadBytes out;
  std::shared_ptr<char[]> joined;  // a read across windows: its pieces copied together
  size_t have = 0;
  while (have < length) {
    uint64_t at = offset + have;
    if (!current_.covers(at)) {
      NSBOX_CHECK(load_chunk_at(at, length - have));
      if (!current_.covers(at)) break;  // the object is shorter than it was said to be
    }
    size_t from = static_cast<size_t>(at - current_.offset);
    size_t take = std::min(length - have, current_.size - from);
    if (have == 0 && take == length) {
      // The window's bytes, owned by the window (and with it, its lease).
      out = {std::shared_ptr<const char[]>(current_.window, current_.data()), {current_.data() + from, take}};
      have = take;
      break;
    }
    if (!joined) joined = std::make_shared_for_overwrite<char[]>(length);
    std::memcpy(joined.get() + have, current_.data() + from, take);
    have += take;
  }
  if (joined) out = {joined, {joined.get(), have}};
  expected_next_ = offset + have;
  if (!current_.budgeted()) current_ = Chunk{};  // unbudgeted: not kept
  if (sequential || offset == 0) prefetch();
  return out;
}

}  // namespace nsbox::bucket
