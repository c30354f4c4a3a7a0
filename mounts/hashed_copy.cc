#include "mounts/hashed_copy.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "isolation/sys/files.h"
#include "isolation/sys/sha256.h"
#include "isolation/sys/syscall.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox {
namespace {

constexpr size_t kChunk = 1 << 20;  // also the pipes' size

struct Pipe {
  UniqueFd read, write;
};

Result<Pipe> make_pipe(const std::string& what) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return fail(sys_error("pipe2 for " + what));
  Pipe p{UniqueFd(fds[0]), UniqueFd(fds[1])};
  (void)::fcntl(p.write.get(), F_SETPIPE_SZ, static_cast<int>(kChunk));  // a smaller pipe only means more calls
  return p;
}

// Hashes the file `fd` as it grows. The copier maps what has landed, in windows of
// kWindow (MAP_POPULATE: the page tables are filled on the copier's time, which it has to
// spare), and hands them over, at most kAhead bytes ahead of the hashing; the hasher thread
// only hashes, and hands each window back to be unmapped by the copier. So the hasher, the
// slower of the two and the one the upload waits for, neither faults nor waits on mmap.
class GrowingFileHasher {
 public:
  GrowingFileHasher(int fd, std::string what) : fd_(fd), what_(std::move(what)), thread_([this] { run(); }) {}
  // A copy that failed: the hasher stops without hashing the rest.
  ~GrowingFileHasher() {
    {
      std::lock_guard lock(mu_);
      abandoned_ = done_ = true;
      cv_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
    for (const auto& w : ready_) ::munmap(w.map, w.length);
    unmap_spent();
  }

  // The file now holds `end` bytes; `last`: and no more will come.
  Result<void> landed(uint64_t end, bool last = false) {
    landed_ = end;
    last_ = last;
    unmap_spent();
    return map_ahead();
  }
  // Waits for the hash of everything landed, mapping the rest and unmapping what is hashed.
  Result<std::string> finish() {
    for (;;) {
      NSBOX_CHECK(map_ahead());
      std::unique_lock lock(mu_);
      if (mapped_ == landed_) {
        done_ = true;
        cv_.notify_all();
      }
      cv_.wait(lock, [&] { return hashed_all_ || !spent_.empty(); });
      bool all = hashed_all_;
      lock.unlock();
      unmap_spent();
      if (all) break;
    }
    thread_.join();
    return digest_;
  }

 private:
  // Windows start at multiples of kWindow: on a page boundary (mmap's offsets must be) for
  // any page size up to 8 MiB.
  static constexpr uint64_t kWindow = 8 << 20;
  static constexpr uint64_t kAhead = 256 << 20;  // ~150 ms of hashing: covers the fsync
  struct Window {
    void* map;
    size_t length;
  };

  Result<void> map_ahead() {
    for (;;) {
      uint64_t end = std::min(landed_, mapped_ + kWindow);
      if (end == mapped_ || (end - mapped_ < kWindow && !last_)) return {};
      {
        std::lock_guard lock(mu_);
        if (queued_ >= kAhead) return {};
      }
      void* map = ::mmap(nullptr, end - mapped_, PROT_READ, MAP_SHARED | MAP_POPULATE, fd_, static_cast<off_t>(mapped_));
      if (map == MAP_FAILED) return fail(sys_error("map " + what_ + " to checksum it"));
      std::lock_guard lock(mu_);
      ready_.push_back({map, end - mapped_});
      queued_ += end - mapped_;
      mapped_ = end;
      cv_.notify_all();
    }
  }

  void unmap_spent() {
    std::vector<Window> spent;
    {
      std::lock_guard lock(mu_);
      spent.swap(spent_);
    }
    for (const auto& w : spent) ::munmap(w.map, w.length);
  }

  void run() {
    Sha256 sha;
    for (;;) {
      Window w;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return !ready_.empty() || done_; });
        if (abandoned_) return;
        if (ready_.empty()) break;  // done and all hashed
        w = ready_.front();
        ready_.pop_front();
      }
      sha.update(std::string_view(static_cast<const char*>(w.map), w.length));
      std::lock_guard lock(mu_);
      queued_ -= w.length;
      spent_.push_back(w);
      cv_.notify_all();
    }
    digest_ = sha.hex_digest();
    std::lock_guard lock(mu_);
    hashed_all_ = true;
    cv_.notify_all();
  }

  int fd_;
  std::string what_;
  uint64_t landed_ = 0, mapped_ = 0;  // the copier's: how far the file and the windows reach
  bool last_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Window> ready_;   // mapped, to hash
  std::vector<Window> spent_;  // hashed, to unmap
  uint64_t queued_ = 0;        // bytes in ready_ and being hashed
  bool done_ = false;          // all landed is mapped: the hasher ends when ready_ is empty
  bool abandoned_ = false;
  bool hashed_all_ = false;
  std::string digest_;
  std::thread thread_;  // last: starts once the members it uses exist
};

// Moves exactly `n` bytes from the pipe into the file.
Result<void> drain(int pipe, int dest, size_t n, const HashedCopyErrors& errors) {
  while (n > 0) {
    ssize_t w = sys::retry_eintr([&] { return ::splice(pipe, nullptr, dest, nullptr, n, SPLICE_F_MOVE); });
    if (w <= 0) return fail(errors.write(w < 0 ? errno : EIO));
    n -= static_cast<size_t>(w);
  }
  return {};
}

// `first` is what the probing splice already moved into `data` (more than zero bytes).
Result<HashedCopy> splice_copy(int source, int dest, uint64_t max_bytes, Pipe data, size_t first,
                               const HashedCopyErrors& errors) {
  GrowingFileHasher hasher(dest, errors.what);
  uint64_t total = 0;
  for (size_t n = first; n > 0;) {
    total += n;
    if (total > max_bytes) return fail(errors.too_large());
    NSBOX_CHECK(drain(data.read.get(), dest, n, errors));
    NSBOX_CHECK(hasher.landed(total));
    ssize_t r = sys::retry_eintr([&] { return ::splice(source, nullptr, data.write.get(), nullptr, kChunk, SPLICE_F_MOVE); });
    if (r < 0) return fail(errors.read(errno));
    n = static_cast<size_t>(r);
  }
  NSBOX_CHECK(hasher.landed(total, true));
  // The flush to disk runs on its own thread, beside the tail of the hashing, which this
  // one keeps fed with mapped windows meanwhile.
  auto flushed = std::async(std::launch::async, [dest] { return ::fsync(dest) == 0 ? 0 : errno; });
  auto digest = hasher.finish();
  if (int err = flushed.get()) return fail(errors.write(err));
  return HashedCopy{total, NSBOX_TRY(std::move(digest))};
}

Result<HashedCopy> read_write_copy(int source, int dest, uint64_t max_bytes, const HashedCopyErrors& errors) {
  Sha256 sha;
  std::vector<char> buf(4 * kChunk);
  uint64_t total = 0;
  for (;;) {
    ssize_t n = sys::retry_eintr([&] { return ::read(source, buf.data(), buf.size()); });
    if (n < 0) return fail(errors.read(errno));
    if (n == 0) break;
    total += static_cast<uint64_t>(n);
    if (total > max_bytes) return fail(errors.too_large());
    std::string_view chunk(buf.data(), static_cast<size_t>(n));
    auto hashed = std::async(std::launch::async, [&sha, chunk] { sha.update(chunk); });
    auto written = files::write_all(dest, chunk, errors.what);
    hashed.get();
    if (!written) return fail(errors.write(written.error().sys_errno));
  }
  if (::fsync(dest) != 0) return fail(errors.write(errno));
  return HashedCopy{total, sha.hex_digest()};
}

}  // namespace

Result<HashedCopy> hashed_copy(int source, int dest, DestAccess access, uint64_t max_bytes, const HashedCopyErrors& errors) {
  if (access == DestAccess::kShared) return read_write_copy(source, dest, max_bytes, errors);
  auto data = NSBOX_TRY(make_pipe(errors.what));
  ssize_t first = sys::retry_eintr([&] { return ::splice(source, nullptr, data.write.get(), nullptr, kChunk, SPLICE_F_MOVE); });
  if (first < 0 && errno == EINVAL) return read_write_copy(source, dest, max_bytes, errors);
  if (first < 0) return fail(errors.read(errno));
  if (first == 0) return HashedCopy{0, sha256_hex("")};  // nothing written: nothing to flush
  return splice_copy(source, dest, max_bytes, std::move(data), static_cast<size_t>(first), errors);
}

}  // namespace nsbox
