#include "mounts/bucket/object_reader.h"

#include <algorithm>
#include <atomic>

namespace nsbox::bucket {
namespace {

std::atomic<uint64_t> g_leased{0};

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

ObjectReader::~ObjectReader() {
  if (ahead_.valid()) ahead_.wait();
}

Result<ObjectReader::Chunk> ObjectReader::fetch(uint64_t offset, size_t length, size_t minimum) {
  Lease lease;
  size_t small = std::max(kFirstWindow, minimum);
  if (length > small) {
    if (try_lease(length)) lease = Lease(length);
    else length = small;
  }
  Chunk chunk{offset, std::string(length, '\0'), std::move(lease)};
  size_t got = NSBOX_TRY(client_.read(key_, etag_, offset, chunk.data.data(), length));
  chunk.data.resize(got);
  return chunk;
}

// Makes current_ cover `offset`: from the background fetch when it is the right one,
// otherwise with a request now.
Result<void> ObjectReader::load_chunk_at(uint64_t offset, size_t at_least) {
  if (ahead_.valid()) {
    auto next = ahead_.get();
    if (next && next->covers(offset)) {
      current_ = std::move(*next);
      return {};
    }
  }
  bool sequential = offset == expected_next_;
  window_ = sequential ? window_ : kFirstWindow;
  size_t length = static_cast<size_t>(std::min<uint64_t>(std::max(window_, at_least), size_ - offset));
  current_ = NSBOX_TRY(fetch(offset, length, at_least));
  return {};
}

void ObjectReader::prefetch_next() {
  uint64_t from = current_.offset + current_.data.size();
  if (ahead_.valid() || from >= size_) return;
  window_ = std::min(window_ * 2, kMaxWindow);
  size_t length = static_cast<size_t>(std::min<uint64_t>(window_, size_ - from));
  ahead_offset_ = from;
  ahead_ = std::async(std::launch::async, [this, from, length] { return fetch(from, length, 0); });
}

Result<std::string> ObjectReader::read(uint64_t offset, size_t length) {
  std::string out;
  if (offset >= size_) return out;
  length = static_cast<size_t>(std::min<uint64_t>(length, size_ - offset));
  out.reserve(length);
  bool sequential = offset == expected_next_;
  while (out.size() < length) {
    uint64_t at = offset + out.size();
    if (!current_.covers(at)) {
      NSBOX_CHECK(load_chunk_at(at, length - out.size()));
      if (!current_.covers(at)) break;  // the object is shorter than it was said to be
    }
    size_t from = static_cast<size_t>(at - current_.offset);
    size_t take = std::min(length - out.size(), current_.data.size() - from);
    out.append(current_.data, from, take);
  }
  expected_next_ = offset + out.size();
  if (sequential || offset == 0) prefetch_next();
  return out;
}

}  // namespace nsbox::bucket
