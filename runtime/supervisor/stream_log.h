// One output stream of a process that outlives its request (runtime/supervisor/processes.h),
// readable from any byte offset while it grows. Bounded: the newest kTailBytes stay in
// memory (trimmed past twice that, so that a flood costs one move per trim, not one per
// chunk); once the stream is longer than that, every byte from the first also goes to a
// file of the files volume (.nsbox/output/<name>), up to kMaxFileBytes. Offsets in neither
// (no volume, a full quota, past the file's cap) are a gap a read skips and reports.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "isolation/sys/unique_fd.h"
#include "mounts/files_volume.h"

namespace nsbox {

class StreamLog {
 public:
  static constexpr size_t kTailBytes = 128 << 10;
  static constexpr uint64_t kMaxFileBytes = 256ull << 20;

  // `volume` may be null (no place to spill); `file_name` is relative to the volume.
  StreamLog(FilesVolume* volume, std::string file_name) : volume_(volume), file_name_(std::move(file_name)) {}

  void append(std::string_view bytes);
  uint64_t end() const { return total_; }  // bytes written so far: the next byte's offset

  struct Chunk {
    uint64_t offset = 0;   // of bytes[0]
    std::string bytes;
    uint64_t skipped = 0;  // bytes between the asked offset and `offset` that are kept nowhere
  };
  // At most `max` bytes from `offset` (clamped to end()).
  Chunk read(uint64_t offset, size_t max) const;
  // "/mnt/files/.nsbox/output/..." once the stream spilled; "" before.
  std::string file_path() const;
  // The spill file goes (its process was removed), if the name is still the file this
  // log made: one the sandbox put there since is left alone.
  void remove_file();

 private:
  void spill();
  void write_file(std::string_view bytes);

  FilesVolume* volume_;
  std::string file_name_;
  std::string tail_;            // bytes [tail_start_, total_)
  uint64_t tail_start_ = 0;
  uint64_t total_ = 0;
  UniqueFd writer_, reader_;    // the spill file; reader_ reopened read-only from writer_
  uint64_t file_bytes_ = 0;     // bytes [0, file_bytes_) are in it
  bool file_failed_ = false;
};

}  // namespace nsbox
