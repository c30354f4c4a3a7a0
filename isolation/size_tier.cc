#include "isolation/size_tier.h"

#include <array>

namespace nsbox {
namespace {

constexpr uint64_t kMiB = 1024ull * 1024;
constexpr uint64_t kGiB = 1024 * kMiB;

struct TierRow {
  SizeTier tier;
  std::string_view name;
  unsigned vcpus;
  uint64_t memory;
  uint64_t pids;
};

constexpr std::array<TierRow, 4> kTiers = {{
    {SizeTier::kStandard, "standard", 1, 1 * kGiB, 512},
    {SizeTier::kMedium, "medium", 2, 2 * kGiB, 1024},
    {SizeTier::kLarge, "large", 4, 4 * kGiB, 2048},
    {SizeTier::kXlarge, "xlarge", 8, 8 * kGiB, 4096},
}};

}  // namespace

Result<SizeTier> parse_size_tier(std::string_view name) {
  for (const auto& row : kTiers)
    if (row.name == name) return row.tier;
  return fail(make_error(ErrorCode::kInvalidArgument,
                         "unknown size '" + std::string(name) + "'",
                         "sizes are standard (1 vCPU, 1 GiB), medium (2, 2 GiB), "
                         "large (4, 4 GiB) and xlarge (8, 8 GiB)"));
}

std::string_view size_tier_name(SizeTier tier) {
  for (const auto& row : kTiers)
    if (row.tier == tier) return row.name;
  return "standard";
}

Limits limits_for(SizeTier tier) {
  for (const auto& row : kTiers) {
    if (row.tier != tier) continue;
    Limits l;
    l.vcpus = row.vcpus;
    l.memory_bytes = row.memory;
    l.pids = row.pids;
    l.tmp_bytes = row.memory / 4;
    l.home_bytes = row.memory;
    l.shm_bytes = row.memory / 16;
    return l;
  }
  return limits_for(SizeTier::kStandard);
}

std::string format_bytes(uint64_t bytes) {
  if (bytes >= kGiB && bytes % kGiB == 0) return std::to_string(bytes / kGiB) + " GiB";
  if (bytes >= kMiB && bytes % kMiB == 0) return std::to_string(bytes / kMiB) + " MiB";
  return std::to_string(bytes) + " bytes";
}

}  // namespace nsbox
