// The digest of a snapshot's archive, computed on two threads while it is written: the
// bytes are cut into 1 MiB chunks (whatever blocks libarchive hands over), each chunk's
// SHA-256 is taken by whichever thread is free, and the digest is the SHA-256 of those
// digests in order (a hash list: as collision-resistant as SHA-256 of the stream, and not
// bound to one core, which on two cores was what made a snapshot slower than tar:
// docs/design.md, "Snapshots"). At most kQueue chunks wait: memory stays bounded whatever
// the workspace's size.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace nsbox::snapshot {

class BackgroundHash {
 public:
  static constexpr size_t kChunk = 1 << 20;
  static constexpr size_t kQueue = 8;
  static constexpr int kThreads = 2;

  BackgroundHash();
  ~BackgroundHash() { finish(); }
  BackgroundHash(const BackgroundHash&) = delete;
  BackgroundHash& operator=(const BackgroundHash&) = delete;

  void update(std::string_view bytes);
  std::string hex_digest();

 private:
  void push();
  void run();
  void finish();

  std::string pending_;  // the chunk being filled (the writer's thread only)
  std::mutex mutex_;
  std::condition_variable ready_, room_;
  std::deque<std::pair<size_t, std::string>> queue_;
  std::vector<std::string> digests_;  // by chunk index, filled as the threads finish them
  size_t next_ = 0;
  bool done_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace nsbox::snapshot
