// The sharded server's part of the API (docs/semantics.md, "Sharded serve"): readiness,
// relaying requests to the sandbox's server, the answers for sandboxes that moved or
// whose server is gone, metrics, and the drain.
#include <chrono>
#include <thread>

#include "api/api_service.h"
#include "api/http_errors.h"
#include "isolation/sys/log.h"

namespace nsbox::api {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr long kNameLookupMs = 2000;

}  // namespace

void ApiService::set_cluster(ClusterConfig cluster, std::function<void()> stop_server) {
  cluster_ = std::move(cluster);
  stop_server_ = std::move(stop_server);
  if (!cluster_.peer_token().empty()) {
    peer_token_.emplace(cluster_.peer_token());
    peers_ = std::make_unique<PeerClient>(cluster_.peer_token(), cluster_.shard());
  }
}

// Ready = accepting new sandboxes: not stopping or draining, and room (capacity left, or
// a warm member to hand out, which adds no sandbox to the machine).
bool ApiService::ready(std::string& reason) const {
  if (stopping_) return reason = "stopping", false;
  if (draining_) return reason = "draining", false;
  if (!cluster_.capacity() || active_sandboxes() < cluster_.capacity()) return true;
  if (pool_)
    for (const auto& [size, slot] : pool_->status()["sizes"].items())
      if (slot.value("ready", 0) > 0) return true;
  reason = "full: " + std::to_string(cluster_.capacity()) + " sandboxes (--capacity)";
  return false;
}

uint64_t ApiService::active_sandboxes() const {
  auto ids = runtime_.store().ids();
  uint64_t n = ids ? ids->size() : 0;
  if (pool_)
    for (const auto& [size, slot] : pool_->status()["sizes"].items()) {
      uint64_t free = slot.value("ready", uint64_t{0}) + slot.value("building", uint64_t{0});
      n -= std::min(n, free);
    }
  return n;
}

bool ApiService::forward_if_elsewhere(Exchange& x, const std::string& sandbox) {
  std::string shard = shard_of_id(sandbox);
  if (!shard.empty()) return shard != cluster_.shard() && forward_to(x, shard, sandbox);
  // A name: ours if we have it, else the peer's that says it has it.
  if (runtime_.store().resolve(sandbox) || !x.request().forwarded_by.empty() || !peers_) return false;
  for (const auto& peer : cluster_.listed_peers()) {
    auto url = cluster_.peer_url(peer);
    if (!url) continue;
    auto found = peers_->get_json(*url, "/v1/sandboxes/" + sandbox, kNameLookupMs);
    if (found && found->first == 200) return forward_to(x, peer, sandbox);
  }
  return false;
}

bool ApiService::forward_to(Exchange& x, const std::string& shard, const std::string& sandbox) {
  auto unavailable = [&](Error e) {
    metrics_.count_forward(false);
    // Its last snapshot, when the store has one: the client can restore it elsewhere.
    Json doc = error_document(e);
    if (auto where = runtime_.sandbox_pointer(sandbox); where) {
      doc["error"]["snapshot"] = where->snapshot;
      if (where->moved) {
        doc = error_document(make_error(ErrorCode::kMoved, "sandbox " + sandbox + " was drained to snapshot " + where->snapshot,
                                        "restore it: POST /v1/sandboxes {\"from_snapshot\": \"" + where->snapshot + "\"}"));
        doc["error"]["snapshot"] = where->snapshot;
        return x.respond(410, doc);
      }
    }
    x.respond(503, doc, {{"Retry-After", "5"}});
  };
  // A relayed request is never relayed again: a server that is told it owns a shard it
  // does not has peers configured differently from ours.
  if (!x.request().forwarded_by.empty()) {
    unavailable(make_error(ErrorCode::kOwnerUnavailable, "shard " + cluster_.shard() + " was sent a request for shard " + shard +
                                                             " by " + x.request().forwarded_by,
                           "the servers' --peers disagree"));
    return true;
  }
  auto url = cluster_.peer_url(shard);
  if (!url || !peers_) {
    unavailable(make_error(ErrorCode::kOwnerUnavailable, "no server is known for shard " + shard + " (--peers)"));
    return true;
  }
  auto sent = peers_->forward(x, *url);
  if (sent) {
    metrics_.count_forward(true);
    return true;
  }
  if (sent.error().code == ErrorCode::kOwnerUnavailable) unavailable(std::move(sent.error()));
  else respond_error(x, sent.error());
  return true;
}

bool ApiService::answer_if_moved(Exchange& x, const std::string& sandbox) {
  if (shard_of_id(sandbox) != cluster_.shard() || runtime_.store().resolve(sandbox)) return false;
  auto where = runtime_.sandbox_pointer(sandbox);
  if (!where || !where->moved) return false;
  Json doc = error_document(make_error(ErrorCode::kMoved, "sandbox " + sandbox + " was drained to snapshot " + where->snapshot,
                                       "restore it: POST /v1/sandboxes {\"from_snapshot\": \"" + where->snapshot + "\"}"));
  doc["error"]["snapshot"] = where->snapshot;
  x.respond(410, doc);
  return true;
}

void ApiService::metrics_route(Exchange& x) {
  MetricsState s;
  std::string reason;
  s.ready = ready(reason);
  s.draining = draining_;
  s.capacity = cluster_.capacity();
  s.cells_running = static_cast<uint64_t>(std::max(0, running_cells_.load()));
  s.commands_running = static_cast<uint64_t>(std::max(0, running_calls_.load() - running_cells_.load()));
  if (auto list = runtime_.list())
    for (const auto& info : *list) ++s.sandboxes[std::string(status_name(info.status))][std::string(size_tier_name(info.record.size))];
  s.active = active_sandboxes();
  if (pool_)
    for (const auto& [size, slot] : pool_->status()["sizes"].items()) {
      s.warm_ready[size] = slot.value("ready", uint64_t{0});
      s.warm_target[size] = slot.value("target", uint64_t{0});
      s.warm_building[size] = slot.value("building", uint64_t{0});
    }
  x.respond_text(200, metrics_.render(s), "text/plain; version=0.0.4; charset=utf-8");
}

void ApiService::drain_route(Exchange& x) {
  if (!cluster_.sharded())
    return respond_error(x, make_error(ErrorCode::kUnsupported, "only a sharded server drains (nsbox serve --shard)",
                                       "stop this one with SIGTERM"));
  bool began = begin_drain();
  x.respond(202, {{"draining", true}, {"began", began}, {"grace_s", cluster_.drain_grace_s()}});
}

bool ApiService::on_stop_signal() {
  if (!cluster_.sharded()) return false;
  if (!begin_drain()) log::info("a drain is under way; the signal changes nothing");
  return true;
}

bool ApiService::begin_drain() {
  if (draining_.exchange(true)) return false;
  metrics_.count_drain();
  std::thread([this] { drain(); }).detach();
  return true;
}

// Readiness is off (draining_); then: no new warm members, running cells and commands get
// the grace, each sandbox is closed to new requests, waited for, snapshotted with its
// files, marked moved in the store and removed; then the server stops. A sandbox whose
// snapshot or tombstone fails stays (nothing is lost; the log says which).
void ApiService::drain() {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cluster_.drain_grace_s()));
  log::info("draining: no new sandboxes; cells and commands have " + std::to_string(int(cluster_.drain_grace_s())) + " s");
  stop_pool();
  while (running_calls_ > 0 && Clock::now() < deadline) std::this_thread::sleep_for(100ms);
  size_t moved = 0, kept = 0;
  auto list = runtime_.list();
  if (!list) log::error("drain: cannot list the sandboxes: " + list.error().message);
  for (const auto& info : list ? *list : std::vector<SandboxInfo>{}) {
    const std::string& id = info.record.id;
    if (!info.record.pool.empty()) continue;  // another server's member (ours are gone)
    {
      std::unique_lock lock(gate_.mutex);
      gate_.closed.insert(id);
      gate_.idle.wait_until(lock, std::max(deadline, Clock::now() + 10s), [&] { return !gate_.in_flight.count(id); });
    }
    auto snap = runtime_.snapshot(id, "", /*include_files=*/true);
    if (!snap) {
      log::error("drain: " + id + " stays: its snapshot failed: " + snap.error().message);
      ++kept;
      continue;
    }
    if (auto marked = runtime_.mark_moved(id, snap->id); !marked) {
      log::error("drain: " + id + " stays: " + marked.error().message + " (snapshot " + snap->id + " was made)");
      ++kept;
      continue;
    }
    if (auto removed = runtime_.remove(id); !removed) log::warn("drain: " + id + " moved to " + snap->id + " but not removed: " + removed.error().message);
    ++moved;
  }
  log::info("drained: " + std::to_string(moved) + " sandboxes moved to snapshots" +
            (kept ? ", " + std::to_string(kept) + " kept (see above)" : ""));
  {
    std::lock_guard lock(gate_.mutex);
    gate_.closed.clear();  // those kept answer again until the server stops
  }
  if (stop_server_) stop_server_();
}

}  // namespace nsbox::api
