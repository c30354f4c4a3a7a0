// Reads of one open object: ranged GETs pinned to the ETag seen at open, with a window
// that starts at 1 MiB, doubles on sequential reads up to 32 MiB, and is fetched ahead in
// the background while the kernel consumes the current one. A random read drops back to
// one small window at the new offset.
#pragma once

#include <future>
#include <string>

#include "mounts/bucket/bucket_client.h"

namespace nsbox::bucket {

class ObjectReader {
 public:
  ObjectReader(BucketClient& client, std::string key, std::string etag, uint64_t size);
  ~ObjectReader();
  ObjectReader(const ObjectReader&) = delete;
  ObjectReader& operator=(const ObjectReader&) = delete;

  // The bytes of [offset, offset + length), fewer only at the end of the object. Not
  // thread-safe: the caller serialises reads of one handle.
  Result<std::string> read(uint64_t offset, size_t length);

  static constexpr size_t kFirstWindow = 1 << 20;
  static constexpr size_t kMaxWindow = 32 << 20;

 private:
  struct Chunk {
    uint64_t offset = 0;
    std::string data;
    bool covers(uint64_t at) const { return at >= offset && at < offset + data.size(); }
  };
  Result<Chunk> fetch(uint64_t offset, size_t length);
  Result<void> load_chunk_at(uint64_t offset, size_t at_least);
  void prefetch_next();

  BucketClient& client_;
  std::string key_;
  std::string etag_;
  uint64_t size_;
  Chunk current_;
  std::future<Result<Chunk>> ahead_;
  uint64_t ahead_offset_ = 0;
  uint64_t expected_next_ = 0;  // where a sequential read goes on
  size_t window_ = kFirstWindow;
};

}  // namespace nsbox::bucket
