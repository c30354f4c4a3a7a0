// What one bucket mount's writes may hold on the host: its `staging_bytes`.
//
// A file open for writing is a staging file on the host's disk, uploaded whole at close.
// Staging files are sparse, so bytes written say nothing of what goes up: a truncate to
// 256 MiB, or one byte written at 200 MiB, is a 256 MiB or 200 MiB upload of zeros, from
// one syscall. So each staging file holds a claim on its mount's budget the size of the
// file as its writers see it (holes included), resized with every write past its end and
// every truncate, and given back when the staging file goes:
//
//   - a file that alone would be larger than the budget (or than the largest object a
//     store takes) can never be staged: EFBIG, as for a file past a filesystem's limit;
//   - a file the mount's other staged files leave no room for: EDQUOT (the mount's quota,
//     told apart from the ENOSPC of a nearly full staging disk); it fits once they close.
//
// Thread-safe: claims of one mount are resized from many FUSE threads.
#pragma once

#include <cerrno>
#include <cstdint>
#include <mutex>

namespace nsbox::bucket {

class StagingBudget {
 public:
  // `limit`: the mount's staging_bytes; `max_file`: the largest object the store takes.
  StagingBudget(uint64_t limit, uint64_t max_file) : limit_(limit), max_file_(max_file < limit ? max_file : limit) {}
  StagingBudget(const StagingBudget&) = delete;
  StagingBudget& operator=(const StagingBudget&) = delete;

  uint64_t limit() const { return limit_; }
  uint64_t max_file() const { return max_file_; }
  uint64_t in_use() const {
    std::lock_guard lock(mutex_);
    return used_;
  }

  // One staging file's share: what it holds now. Moves with its file; gives it back when
  // destroyed.
  class Claim {
   public:
    Claim() = default;
    explicit Claim(StagingBudget& budget) : budget_(&budget) {}
    Claim(Claim&& other) noexcept : budget_(other.budget_), held_(other.held_) { other.budget_ = nullptr, other.held_ = 0; }
    Claim& operator=(Claim&& other) noexcept {
      if (this != &other) {
        release();
        budget_ = other.budget_, held_ = other.held_;
        other.budget_ = nullptr, other.held_ = 0;
      }
      return *this;
    }
    ~Claim() { release(); }

    // The staging file is to be `size` bytes: 0 when that fits (the claim is then `size`),
    // else EFBIG or EDQUOT and the claim is as it was. Shrinking always fits.
    int resize(uint64_t size) { return budget_ ? budget_->resize(held_, size) : 0; }
    // Grows only: what a write ending at `end` needs (a write inside the file needs nothing).
    int cover(uint64_t end) { return end > held_ ? resize(end) : 0; }
    uint64_t held() const { return held_; }

   private:
    void release() {
      if (budget_) budget_->resize(held_, 0);
    }
    StagingBudget* budget_ = nullptr;
    uint64_t held_ = 0;
  };

 private:
  int resize(uint64_t& held, uint64_t size) {
    std::lock_guard lock(mutex_);
    if (size <= held) {
      used_ -= held - size;
      held = size;
      return 0;
    }
    if (size > max_file_) return EFBIG;
    if (used_ - held + size > limit_) return EDQUOT;
    used_ += size - held;
    held = size;
    return 0;
  }

  const uint64_t limit_;
  const uint64_t max_file_;
  mutable std::mutex mutex_;
  uint64_t used_ = 0;
};

// What all the mounts staging on one disk leave free together: 1 GiB, or 5 % of a larger
// disk. Past it a writer gets ENOSPC (the builtin server's staging files; rclone's and
// s3fs's caches are capped to keep it too).
constexpr uint64_t staging_disk_reserve(uint64_t disk_bytes) {
  return disk_bytes / 20 > (1ull << 30) ? disk_bytes / 20 : 1ull << 30;
}

}  // namespace nsbox::bucket
