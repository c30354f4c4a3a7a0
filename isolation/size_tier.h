// Size tiers: the four sandbox sizes of the hosted workbenches, turned into limits.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "isolation/sys/error.h"

namespace nsbox {

enum class SizeTier { kStandard, kMedium, kLarge, kXlarge };

struct Limits {
  unsigned vcpus = 1;
  uint64_t memory_bytes = 0;  // RAM; swap is never allowed on top
  uint64_t pids = 0;
  // tmpfs pages are charged to the sandbox's memory, so each cap is a share of it and a
  // full /tmp gives ENOSPC well before the OOM killer would act.
  uint64_t tmp_bytes = 0;
  uint64_t shm_bytes = 0;
  // The default size of /home/user's volume, on disk (--home-size changes it). A one-shot
  // sandbox, which keeps nothing, has a tmpfs of tmp_bytes there instead.
  uint64_t home_bytes = 0;
};

Result<SizeTier> parse_size_tier(std::string_view name);
std::string_view size_tier_name(SizeTier tier);
Limits limits_for(SizeTier tier);
std::string format_bytes(uint64_t bytes);  // "1 GiB", "256 MiB"

}  // namespace nsbox
