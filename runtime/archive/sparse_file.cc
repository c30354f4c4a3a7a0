#include "runtime/archive/sparse_file.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace nsbox::snapshot {

void BlockCount::add(uint64_t offset, uint64_t length) {
  if (length == 0) return;
  uint64_t from = std::max(offset / kBlock * kBlock, covered_);
  uint64_t to = (offset + length + kBlock - 1) / kBlock * kBlock;
  if (to > from) total_ += to - from;
  covered_ = std::max(covered_, to);
}

Result<FileData> file_data(int fd, uint64_t size, uint64_t max_runs, const std::string& rel) {
  FileData d;
  for (uint64_t pos = 0; pos < size;) {
    off_t data = ::lseek(fd, static_cast<off_t>(pos), SEEK_DATA);
    if (data < 0 && errno == ENXIO) break;  // only a hole is left
    if (data < 0) return fail(sys_error("find data in " + rel));
    if (static_cast<uint64_t>(data) >= size) break;
    off_t hole = ::lseek(fd, data, SEEK_HOLE);
    if (hole < 0) return fail(sys_error("find a hole in " + rel));
    Extent run{static_cast<uint64_t>(data), std::min(static_cast<uint64_t>(hole), size) - static_cast<uint64_t>(data)};
    if (run.length == 0) break;  // it shrank under us
    pos = run.end();
    if (!d.extents.empty() && d.extents.back().end() == run.offset) {  // it changed under us
      d.extents.back().length += run.length;
      continue;
    }
    if (d.extents.size() == max_runs)
      return fail(make_error(ErrorCode::kLimitExceeded, "'" + rel + "' has more than " + std::to_string(max_runs) + " runs of data between holes",
                             "a snapshot keeps at most that many in a file: rewrite it with fewer holes, or remove it"));
    d.extents.push_back(run);
  }
  d.sparse = size > 0 && !(d.extents.size() == 1 && d.extents[0].offset == 0 && d.extents[0].length == size);
  if (!d.sparse) d.extents = {Extent{0, size}};
  return d;
}

Zeros::~Zeros() {
  if (map_) ::munmap(map_, kSize);
}

Result<const void*> Zeros::get() {
  if (!map_) {
    void* map = ::mmap(nullptr, kSize, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED) return fail(sys_error("map zeros for the holes"));
    map_ = map;
  }
  return map_;
}

}  // namespace nsbox::snapshot
