#include "api/metrics.h"

#include <cstdio>

namespace nsbox::api {
namespace {

std::string number(double v) {
  char out[32];
  std::snprintf(out, sizeof out, "%.6g", v);
  return out;
}

struct Text {
  std::string out;
  void head(const char* name, const char* type, const char* help) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  // Label values here are sizes, states and path names: [a-z]+, nothing to escape.
  void sample(const std::string& name, const std::string& labels, const std::string& value) {
    out += name + (labels.empty() ? "" : "{" + labels + "}") + " " + value + "\n";
  }
};

}  // namespace

void Metrics::observe_create(bool warm, double seconds) {
  Histogram& h = warm ? warm_ : cold_;
  for (size_t i = 0; i < kCreateBuckets.size(); ++i)
    if (seconds <= kCreateBuckets[i]) h.buckets[i]++;
  h.count++;
  h.sum_us += static_cast<uint64_t>(seconds * 1e6);
}

std::string Metrics::render(const MetricsState& s) const {
  Text t;
  t.head("nsbox_ready", "gauge", "1 while the server accepts new sandboxes (GET /readyz)");
  t.sample("nsbox_ready", "", s.ready ? "1" : "0");
  t.head("nsbox_draining", "gauge", "1 once a drain has begun");
  t.sample("nsbox_draining", "", s.draining ? "1" : "0");
  t.head("nsbox_sandboxes", "gauge", "sandboxes on this server by status and size (warm-pool members included)");
  for (const auto& [status, sizes] : s.sandboxes)
    for (const auto& [size, n] : sizes) t.sample("nsbox_sandboxes", "status=\"" + status + "\",size=\"" + size + "\"", std::to_string(n));
  t.head("nsbox_active", "gauge", "sandboxes in use: every sandbox but the warm pool's free members");
  t.sample("nsbox_active", "", std::to_string(s.active));
  t.head("nsbox_capacity", "gauge", "--capacity (+Inf without one)");
  t.sample("nsbox_capacity", "", s.capacity ? std::to_string(s.capacity) : "+Inf");
  t.head("nsbox_free_slots", "gauge", "sandboxes this server may still make (+Inf without --capacity); warm members count as made");
  t.sample("nsbox_free_slots", "", s.capacity ? std::to_string(s.free_slots) : "+Inf");
  t.head("nsbox_warm_ready", "gauge", "warm-pool members ready to be claimed, by size");
  for (const auto& [size, n] : s.warm_ready) t.sample("nsbox_warm_ready", "size=\"" + size + "\"", std::to_string(n));
  t.head("nsbox_warm_target", "gauge", "the warm pool's target, by size");
  for (const auto& [size, n] : s.warm_target) t.sample("nsbox_warm_target", "size=\"" + size + "\"", std::to_string(n));
  t.head("nsbox_warm_building", "gauge", "warm-pool members being built, by size");
  for (const auto& [size, n] : s.warm_building) t.sample("nsbox_warm_building", "size=\"" + size + "\"", std::to_string(n));
  t.head("nsbox_calls_running", "gauge", "cells and commands in flight");
  t.sample("nsbox_calls_running", "kind=\"cell\"", std::to_string(s.cells_running));
  t.sample("nsbox_calls_running", "kind=\"command\"", std::to_string(s.commands_running));
  t.head("nsbox_create_seconds", "histogram", "time to answer a create, by path (warm: claimed from the pool)");
  for (const auto& [path, h] : {std::pair<const char*, const Histogram*>{"warm", &warm_}, {"cold", &cold_}}) {
    std::string label = std::string("path=\"") + path + "\"";
    for (size_t i = 0; i < kCreateBuckets.size(); ++i)
      t.sample("nsbox_create_seconds_bucket", label + ",le=\"" + number(kCreateBuckets[i]) + "\"", std::to_string(h->buckets[i].load()));
    t.sample("nsbox_create_seconds_bucket", label + ",le=\"+Inf\"", std::to_string(h->count.load()));
    t.sample("nsbox_create_seconds_sum", label, number(h->sum_us.load() / 1e6));
    t.sample("nsbox_create_seconds_count", label, std::to_string(h->count.load()));
  }
  t.head("nsbox_kernel_zygote_serving", "gauge",
         "1 while the server's kernel zygote serves (new kernels are forked from it); 0 while none does (not started: "
         "--no-kernel-zygote or a host without one, or between a zygote's end and its start again): kernels start through init");
  t.sample("nsbox_kernel_zygote_serving", "", s.kernel_zygote_serving ? "1" : "0");
  t.head("nsbox_kernel_zygote_starts_total", "counter", "kernel zygotes started (the first, and each after one ended)");
  t.sample("nsbox_kernel_zygote_starts_total", "", std::to_string(s.kernel_zygote_starts));
  t.head("nsbox_forwarded_requests_total", "counter", "requests relayed to the sandbox's server (another shard)");
  t.sample("nsbox_forwarded_requests_total", "", std::to_string(forwarded_.load()));
  t.head("nsbox_forward_failures_total", "counter", "requests whose sandbox's server did not answer");
  t.sample("nsbox_forward_failures_total", "", std::to_string(forward_failures_.load()));
  t.head("nsbox_drains_total", "counter", "drains begun");
  t.sample("nsbox_drains_total", "", std::to_string(drains_.load()));
  return t.out;
}

}  // namespace nsbox::api
