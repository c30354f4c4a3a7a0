#include "runtime/archive/hash_list.h"

#include <algorithm>
#include <system_error>

#include "isolation/sys/sha256.h"

namespace nsbox::snapshot {

BackgroundHash::BackgroundHash() {
  // A thread that cannot start (a pids limit) leaves the hashing to the others, or to the
  // writer itself: never a std::terminate.
  for (int i = 0; i < kThreads; ++i) {
    try {
      threads_.emplace_back([this] { run(); });
    } catch (const std::system_error&) {
      break;
    }
  }
}

void BackgroundHash::update(std::string_view bytes) {
  while (!bytes.empty()) {
    size_t take = std::min(bytes.size(), kChunk - pending_.size());
    pending_.append(bytes.substr(0, take));
    bytes.remove_prefix(take);
    if (pending_.size() == kChunk) push();
  }
}

std::string BackgroundHash::hex_digest() {
  if (!pending_.empty()) push();
  finish();
  Sha256 list;
  list.update("nsbox-hash-list-v1:" + std::to_string(kChunk) + ":");
  for (const auto& d : digests_) list.update(d);
  return list.hex_digest();
}

void BackgroundHash::push() {
  if (threads_.empty()) {
    Sha256 hash;
    hash.update(pending_);
    digests_.push_back(hash.hex_digest());
    pending_.clear();
    return;
  }
  std::unique_lock lock(mutex_);
  room_.wait(lock, [&] { return queue_.size() < kQueue; });
  queue_.emplace_back(next_++, std::move(pending_));
  digests_.emplace_back();
  pending_.clear();
  pending_.reserve(kChunk);
  ready_.notify_one();
}

void BackgroundHash::run() {
  for (;;) {
    std::pair<size_t, std::string> chunk;
    {
      std::unique_lock lock(mutex_);
      ready_.wait(lock, [&] { return !queue_.empty() || done_; });
      if (queue_.empty()) break;
      chunk = std::move(queue_.front());
      queue_.pop_front();
      room_.notify_one();
    }
    Sha256 hash;
    hash.update(chunk.second);
    std::string digest = hash.hex_digest();
    std::lock_guard lock(mutex_);
    digests_[chunk.first] = std::move(digest);
  }
}

void BackgroundHash::finish() {
  {
    std::lock_guard lock(mutex_);
    done_ = true;
    ready_.notify_all();
  }
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

}  // namespace nsbox::snapshot
