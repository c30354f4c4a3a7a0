#include "mounts/hashed_copy.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <condition_variable>
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

// Hashes the file `fd` as it grows: landed() tells how far the copier has got.
class GrowingFileHasher {
 public:
  GrowingFileHasher(int fd, std::string what) : fd_(fd), what_(std::move(what)), thread_([this] { run(); }) {}
  // A copy that failed: the hasher stops without hashing the rest.
  ~GrowingFileHasher() {
    {
      std::lock_guard lock(mu_);
      abandoned_ = done_ = true;
      cv_.notify_one();
    }
    if (thread_.joinable()) thread_.join();
  }

  void landed(uint64_t end) {
    std::lock_guard lock(mu_);
    end_ = end;
    cv_.notify_one();
  }
  // Waits for the hash of everything landed; the error if mapping the file failed.
  Result<std::string> finish() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
      cv_.notify_one();
    }
    if (thread_.joinable()) thread_.join();
    if (failed_) return fail(sys_error("map " + what_ + " to checksum it", failed_));
    return digest_;
  }

 private:
  void run() {
    static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    Sha256 sha;
    uint64_t hashed = 0;
    for (;;) {
      uint64_t end;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return end_ > hashed || done_; });
        if (abandoned_) return;
        end = end_;
        if (end == hashed) break;  // done and all hashed
      }
      uint64_t base = hashed & ~(page - 1);
      void* map = ::mmap(nullptr, end - base, PROT_READ, MAP_SHARED | MAP_POPULATE, fd_, static_cast<off_t>(base));
      if (map == MAP_FAILED) {
        failed_ = errno;
        return;
      }
      sha.update(std::string_view(static_cast<const char*>(map) + (hashed - base), end - hashed));
      ::munmap(map, end - base);
      hashed = end;
    }
    digest_ = sha.hex_digest();
  }

  int fd_;
  std::string what_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t end_ = 0;
  bool done_ = false;
  bool abandoned_ = false;
  int failed_ = 0;
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
    hasher.landed(total);
    ssize_t r = sys::retry_eintr([&] { return ::splice(source, nullptr, data.write.get(), nullptr, kChunk, SPLICE_F_MOVE); });
    if (r < 0) return fail(errors.read(errno));
    n = static_cast<size_t>(r);
  }
  // The flush to disk and the tail of the hashing overlap.
  if (::fsync(dest) != 0) return fail(errors.write(errno));
  return HashedCopy{total, NSBOX_TRY(hasher.finish())};
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
