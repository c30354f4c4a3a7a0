// Large uploads as equal-size parts sent in parallel: S3's multipart upload and Azure's
// Put Block share the plan and the loop; each client says how one part goes up and what
// it keeps of the answer (an ETag, a block ID).
#pragma once

#include <cstdint>
#include <functional>

#include "isolation/sys/error.h"

namespace nsbox::bucket {

struct PartPlan {
  uint64_t part_size = 0;  // every part but the last, which may be shorter
  uint64_t count = 0;
};

// Parts of at least `min_part` bytes, at most `max_parts` of them, their size rounded up
// to a whole MiB.
PartPlan plan_parts(uint64_t size, uint64_t min_part, uint64_t max_parts);

// Sends one part: the `index`th (from 0), `length` bytes from `offset` of the source.
using SendPart = std::function<Result<void>(uint64_t index, uint64_t offset, uint64_t length)>;

// Sends each part of `plan` once, on up to `parallel` threads. The first failure stops
// the handing out of parts (those already sent stay sent: the caller aborts or leaves
// them) and is the error returned.
Result<void> upload_parts(const PartPlan& plan, uint64_t size, int parallel, const SendPart& send_part);

}  // namespace nsbox::bucket
