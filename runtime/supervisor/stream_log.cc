#include "runtime/supervisor/stream_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "isolation/sys/files.h"
#include "isolation/sys/syscall.h"

namespace nsbox {

void StreamLog::append(std::string_view bytes) {
  if (bytes.empty()) return;
  total_ += bytes.size();
  tail_.append(bytes);
  if (writer_) write_file(bytes);
  else if (total_ > kTailBytes && !file_failed_) spill();
  if (tail_.size() > 2 * kTailBytes) {
    size_t cut = tail_.size() - kTailBytes;
    tail_.erase(0, cut);
    tail_start_ += cut;
  }
}

// The first time the stream outgrows its tail: the file starts with everything so far,
// which is exactly the tail (nothing was trimmed yet: trimming starts at twice the tail).
void StreamLog::spill() {
  if (!volume_) {
    file_failed_ = true;
    return;
  }
  auto fd = volume_->create_file(file_name_);
  if (!fd) {
    file_failed_ = true;
    return;
  }
  writer_ = std::move(*fd);
  // create_file opens write-only; reading back goes through our own descriptor's inode
  // (never a path the sandbox could have swapped for a link since).
  std::string self = "/proc/self/fd/" + std::to_string(writer_.get());
  reader_ = UniqueFd(::open(self.c_str(), O_RDONLY | O_CLOEXEC));
  if (!reader_) {
    writer_.reset();
    file_failed_ = true;
    return;
  }
  write_file(tail_);
}

void StreamLog::remove_file() {
  if (!writer_ || !volume_) return;
  struct stat mine{}, there{};
  bool same = ::fstat(writer_.get(), &mine) == 0;
  if (same) {
    auto named = volume_->open_file(file_name_, &there);
    same = named && there.st_dev == mine.st_dev && there.st_ino == mine.st_ino;
  }
  writer_.reset();
  reader_.reset();
  file_failed_ = true;  // nothing more goes to a file, nothing is read back from one
  if (same) (void)volume_->remove(file_name_, false);
}

void StreamLog::write_file(std::string_view bytes) {
  if (file_failed_ || file_bytes_ >= kMaxFileBytes) return;
  std::string_view part = bytes.substr(0, std::min<uint64_t>(bytes.size(), kMaxFileBytes - file_bytes_));
  if (!files::write_all(writer_.get(), part, file_name_)) {
    file_failed_ = true;  // the quota, most likely: what is in the file stays readable
    return;
  }
  file_bytes_ += part.size();
}

StreamLog::Chunk StreamLog::read(uint64_t offset, size_t max) const {
  Chunk c;
  c.offset = std::min(offset, total_);
  if (c.offset < tail_start_ && reader_ && c.offset < file_bytes_) {
    c.bytes.resize(static_cast<size_t>(std::min<uint64_t>(max, file_bytes_ - c.offset)));
    ssize_t n = sys::retry_eintr([&] { return ::pread(reader_.get(), c.bytes.data(), c.bytes.size(), static_cast<off_t>(c.offset)); });
    // The file is in the sandbox's volume: code inside may have truncated it.
    c.bytes.resize(n > 0 ? static_cast<size_t>(n) : 0);
    if (!c.bytes.empty()) return c;
  }
  if (c.offset < tail_start_) {
    c.skipped = tail_start_ - c.offset;
    c.offset = tail_start_;
  }
  size_t at = static_cast<size_t>(c.offset - tail_start_);
  c.bytes = tail_.substr(at, std::min(max, tail_.size() - at));
  return c;
}

std::string StreamLog::file_path() const { return writer_ ? FilesVolume::inside_path(file_name_) : std::string(); }

}  // namespace nsbox
