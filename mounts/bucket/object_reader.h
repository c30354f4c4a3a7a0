// Reads of one open object: ranged GETs pinned to the ETag seen at open, in windows that
// start at 1 MiB and double on sequential reads up to 16 MiB; on sequential reads up to
// kAhead windows are fetched in parallel, in the background, while the kernel consumes the
// current one (one connection each: a store serves several streams faster than one). A
// random read drops what was fetched ahead and goes back to one small window.
//
// Windows are host memory that no limit of the sandbox covers: every window of every open
// file of a server takes a share of kReadBudget, and background fetches are at most
// kMaxFetchingAhead threads. Past either, reads fetch just what the kernel asked for.
#pragma once

#include <deque>
#include <future>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "mounts/bucket/bucket_client.h"

namespace nsbox::bucket {

// Bytes read, and the window they are in, kept alive while they are used (a read inside
// one window, nearly every read, copies nothing on its way to the kernel).
struct ReadBytes {
  std::shared_ptr<const char[]> owner;
  std::string_view bytes;
};

class ObjectReader {
 public:
  ObjectReader(BucketClient& client, std::string key, std::string etag, uint64_t size);
  ~ObjectReader();
  ObjectReader(const ObjectReader&) = delete;
  ObjectReader& operator=(const ObjectReader&) = delete;

  // The bytes of [offset, offset + length), fewer only at the end of the object. Not
  // thread-safe: the caller serialises reads of one handle. Bytes held keep their window,
  // and its share of the budget, until they go.
  Result<ReadBytes> read(uint64_t offset, size_t length);

  static constexpr size_t kFirstWindow = 1 << 20;
  static constexpr size_t kMaxWindow = 16 << 20;
  static constexpr size_t kAhead = 4;
  static constexpr uint64_t kReadBudget = 256 << 20;
  static constexpr int kMaxFetchingAhead = 32;
  static uint64_t budget_in_use();  // for tests

 private:
  // A share of kReadBudget, given back when its chunk goes.
  class Lease {
   public:
    Lease() = default;
    explicit Lease(uint64_t bytes) : bytes_(bytes) {}
    Lease(Lease&& other) noexcept : bytes_(std::exchange(other.bytes_, 0)) {}
    Lease& operator=(Lease&& other) noexcept;
    ~Lease();
    uint64_t bytes() const { return bytes_; }

   private:
    uint64_t bytes_ = 0;
  };
  // Fetched bytes and their share of the budget, which go together.
  struct Window {
    std::unique_ptr<char[]> bytes;  // not zeroed before the fetch fills it
    Lease lease;
  };
  struct Chunk {
    uint64_t offset = 0;
    std::shared_ptr<Window> window;  // shared with the ReadBytes handed out
    size_t size = 0;
    bool covers(uint64_t at) const { return at >= offset && at < offset + size; }
    const char* data() const { return window->bytes.get(); }
    bool budgeted() const { return window && window->lease.bytes() > 0; }
  };
  Result<Chunk> fetch(uint64_t offset, size_t length, Lease lease);
  Result<void> load_chunk_at(uint64_t offset, size_t at_least);
  void prefetch();

  BucketClient& client_;
  std::string key_;
  std::string etag_;
  uint64_t size_;
  Chunk current_;
  struct Pending {
    uint64_t offset;
    uint64_t length;
    std::future<Result<Chunk>> chunk;
  };
  std::deque<Pending> ahead_;   // in the order of the object
  uint64_t scheduled_end_ = 0;  // where the next window fetched ahead starts
  uint64_t expected_next_ = 0;  // where a sequential read goes on
  size_t window_ = kFirstWindow;
};

}  // namespace nsbox::bucket
