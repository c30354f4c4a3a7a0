// What `GET /metrics` says (Prometheus' text exposition format 0.0.4, written by hand:
// a few gauges, counters and one histogram need no library). The counters live here,
// bumped by the routes; the gauges are read from the server's state at each scrape.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <string>

namespace nsbox::api {

// The state a scrape reads (ApiService fills it).
struct MetricsState {
  std::map<std::string, std::map<std::string, uint64_t>> sandboxes;  // status -> size -> count
  std::map<std::string, uint64_t> warm_ready, warm_target, warm_building;  // per size
  uint64_t active = 0;    // sandboxes that are not free warm-pool members
  uint64_t capacity = 0;  // 0: no limit of its own (free slots are then +Inf)
  uint64_t free_slots = 0;
  uint64_t cells_running = 0, commands_running = 0;
  bool ready = false, draining = false;
  bool kernel_zygote_serving = false;  // new kernels are forked by the server's zygote
  uint64_t kernel_zygote_starts = 0;
};

class Metrics {
 public:
  static constexpr std::array<double, 12> kCreateBuckets = {0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

  void observe_create(bool warm, double seconds);
  void count_forward(bool ok) { (ok ? forwarded_ : forward_failures_)++; }
  void count_drain() { drains_++; }

  std::string render(const MetricsState& state) const;

 private:
  struct Histogram {
    std::array<std::atomic<uint64_t>, kCreateBuckets.size()> buckets{};
    std::atomic<uint64_t> count = 0;
    std::atomic<uint64_t> sum_us = 0;
  };
  Histogram warm_, cold_;
  std::atomic<uint64_t> forwarded_ = 0, forward_failures_ = 0, drains_ = 0;
};

}  // namespace nsbox::api
