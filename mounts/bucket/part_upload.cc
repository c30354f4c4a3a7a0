#include "mounts/bucket/part_upload.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace nsbox::bucket {

PartPlan plan_parts(uint64_t size, uint64_t min_part, uint64_t max_parts) {
  constexpr uint64_t kMiB = 1 << 20;
  uint64_t part = std::max(min_part, (size + max_parts - 1) / max_parts);
  part = (part + kMiB - 1) & ~(kMiB - 1);
  return {part, (size + part - 1) / part};
}

Result<void> upload_parts(const PartPlan& plan, uint64_t size, int parallel, const SendPart& send_part) {
  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::optional<Error> first_error;
  auto worker = [&] {
    for (uint64_t i = next++; i < plan.count && !failed; i = next++) {
      uint64_t offset = i * plan.part_size;
      auto sent = send_part(i, offset, std::min(plan.part_size, size - offset));
      if (!sent) {
        std::lock_guard lock(error_mutex);
        if (!first_error) first_error = std::move(sent.error());
        failed = true;
        return;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < std::max(parallel, 1) && static_cast<uint64_t>(t) < plan.count; ++t)
    threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  if (first_error) return fail(std::move(*first_error));
  return {};
}

}  // namespace nsbox::bucket
