#include "kernel/zygote/zygote_pages.h"

#include <linux/io_uring.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <utility>
#include <vector>

#include "kernel/private_mappings.h"

namespace nsbox::kernel {
namespace {

constexpr size_t kPage = 4096;
// Larger mappings are reservations (a sanitizer's shadow), never the interpreter's heap.
constexpr size_t kMostCopied = size_t{1} << 30;
// io_uring's limit on registered buffers (IORING_MAX_REG_BUFFERS).
constexpr size_t kMostRuns = size_t{1} << 14;

struct Run {
  char* start;
  size_t length;
};

// The runs of present pages in the private writable mappings. The mappings are listed
// first and mincore'd after: the maps file is read as it is, not while we allocate.
std::vector<Run> present_writable_runs() {
  std::vector<Run> mappings, runs;
  for_each_private_writable_mapping([&](const Mapping& m) {
    if (m.length <= kMostCopied) mappings.push_back({static_cast<char*>(m.start), m.length});
  });
  std::vector<unsigned char> present;
  for (const auto& m : mappings) {
    present.assign(m.length / kPage, 0);
    if (::mincore(m.start, m.length, present.data()) != 0) continue;
    for (size_t i = 0; i < present.size();) {
      if (!(present[i] & 1)) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < present.size() && (present[j] & 1)) ++j;
      runs.push_back({m.start + i * kPage, (j - i) * kPage});
      i = j;
    }
  }
  return runs;
}

}  // namespace

Result<PinnedPages> pin_present_writable_pages() {
  auto runs = present_writable_runs();
  if (runs.size() > kMostRuns)
    return fail(make_error(ErrorCode::kUnsupported, std::to_string(runs.size()) + " runs of present pages, over io_uring's " +
                                                        std::to_string(kMostRuns) + " buffers"));
  io_uring_params params{};
  UniqueFd ring(static_cast<int>(::syscall(__NR_io_uring_setup, 1, &params)));  // O_CLOEXEC
  if (!ring) return fail(sys_error("io_uring_setup"));
  std::vector<iovec> buffers;
  PinnedPages pinned;
  for (const auto& r : runs) {
    buffers.push_back({r.start, r.length});
    pinned.bytes += r.length;
  }
  if (::syscall(__NR_io_uring_register, ring.get(), IORING_REGISTER_BUFFERS, buffers.data(),
                static_cast<unsigned>(buffers.size())) != 0)
    return fail(sys_error("io_uring_register(IORING_REGISTER_BUFFERS, " + std::to_string(pinned.bytes >> 10) + " KiB in " +
                          std::to_string(buffers.size()) + " runs)"));
  pinned.ring = std::move(ring);
  pinned.runs = buffers.size();
  return pinned;
}

void copy_shared_writable_pages() {
  for (const auto& r : present_writable_runs()) (void)::madvise(r.start, r.length, MADV_POPULATE_WRITE);
}

}  // namespace nsbox::kernel
