// A file's runs of data and its holes, as a snapshot stores them (runtime/archive/
// tree_archive.h): found with SEEK_DATA and SEEK_HOLE, counted as a disk counts them, and
// walked over without being read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "isolation/sys/error.h"

namespace nsbox::snapshot {

// What runs of data cost a volume: the blocks they touch, of 1 KiB (ext4's smallest, which
// mkfs gives nsbox's volumes under 512 MiB), each counted once. Runs come in order, apart.
class BlockCount {
 public:
  static constexpr uint64_t kBlock = 1024;
  void add(uint64_t offset, uint64_t length);
  uint64_t total() const { return total_; }

 private:
  uint64_t total_ = 0, covered_ = 0;
};

struct Extent {
  uint64_t offset = 0, length = 0;
  uint64_t end() const { return offset + length; }
};

// A file's data as SEEK_DATA and SEEK_HOLE see it, within its size: its runs, in order.
struct FileData {
  std::vector<Extent> extents;  // in order, apart; [0, size) for a dense file
  bool sparse = false;          // some of [0, size) is a hole
};

// At most `max_runs` runs: libarchive holds a file's whole map in memory, writing or
// reading (~170 bytes a run). A file of more is refused, not stored with some holes filled:
// zeros stored would cost a restore more than the file cost the sandbox. `rel` names it in
// errors.
Result<FileData> file_data(int fd, uint64_t size, uint64_t max_runs, const std::string& rel);

// Zeros for the holes: libarchive's pax writer is handed a sparse file's every byte and
// stores only its data, so a hole is passed as calls of up to 1 GiB from a read-only
// mapping that is never touched (no memory, and not counted by RLIMIT_DATA).
class Zeros {
 public:
  static constexpr size_t kSize = 1ull << 30;
  Zeros() = default;
  Zeros(const Zeros&) = delete;
  Zeros& operator=(const Zeros&) = delete;
  ~Zeros();
  Result<const void*> get();  // mapped on first use

 private:
  void* map_ = nullptr;
};

}  // namespace nsbox::snapshot
