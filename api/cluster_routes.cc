// The sharded server's part of the API (docs/semantics.md, "Sharded serve"): readiness
// and admission under --capacity, relaying requests to the sandbox's server, the answers
// for sandboxes that moved or whose server is gone, metrics, and the drain.
#include <chrono>
#include <thread>

#include "api/api_service.h"
#include "api/http_errors.h"
#include "isolation/sys/files.h"
#include "isolation/sys/log.h"

namespace nsbox::api {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr long kNameLookupMs = 2000;

// 410 for a sandbox a drain moved: the snapshot to restore, in the error and its hint.
Json moved_document(const std::string& sandbox, const std::string& snapshot) {
  Json doc = error_document(make_error(ErrorCode::kMoved, "sandbox " + sandbox + " was drained to snapshot " + snapshot,
                                       "restore it: POST /v1/sandboxes {\"from_snapshot\": \"" + snapshot + "\"}"));
  doc["error"]["snapshot"] = snapshot;
  return doc;
}

Error not_ready_error(const std::string& reason) {
  return make_error(ErrorCode::kUnavailable, "this server takes no new sandboxes now (" + reason + ")",
                    "retry: another server of the cluster takes it");
}

}  // namespace

void ApiService::set_cluster(ClusterConfig cluster, std::function<void()> stop_server) {
  cluster_ = std::move(cluster);
  stop_server_ = std::move(stop_server);
  if (!cluster_.peer_token().empty()) {
    peer_token_.emplace(cluster_.peer_token());
    peers_ = std::make_unique<PeerClient>(cluster_.peer_token(), cluster_.shard());
  }
}

uint64_t ApiService::free_members() const {
  uint64_t n = 0;
  if (!pool_) return 0;
  const Json status = pool_->status();  // kept: the loop below walks into it
  for (const auto& [size, slot] : status["sizes"].items()) n += slot.value("ready", uint64_t{0});
  return n;
}

uint64_t ApiService::sandboxes_here() const {
  auto ids = runtime_.store().ids();
  std::lock_guard lock(admit_mutex_);
  return (ids ? ids->size() : 0) + creating_;
}

// Ready = accepting new sandboxes: not stopping or draining, and room under --capacity
// (every sandbox of the machine counts) or a warm member to hand out, which adds none.
bool ApiService::ready(std::string& reason) const {
  if (stopping_) return reason = "stopping", false;
  if (draining_) return reason = "draining", false;
  if (!cluster_.capacity() || sandboxes_here() < cluster_.capacity() || free_members() > 0) return true;
  reason = "full: " + std::to_string(cluster_.capacity()) + " sandboxes (--capacity)";
  return false;
}

ApiService::Admission::~Admission() {
  if (!s_) return;
  std::lock_guard lock(s_->admit_mutex_);
  --s_->creating_;
}

Result<ApiService::Admission> ApiService::admit(std::optional<SizeTier> warm) {
  if (stopping_) return fail(not_ready_error("stopping"));
  if (draining_) return fail(not_ready_error("draining"));
  const bool claim = warm && pool_ && pool_->serves(*warm) && free_members() > 0;
  // Counted only where a capacity bounds them: a listing stats every sandbox's record,
  // which a create from the pool should not pay per sandbox the server holds.
  const bool bounded = cluster_.capacity() && !claim;
  uint64_t here = 0;
  if (bounded)
    if (auto ids = runtime_.store().ids()) here = ids->size();
  std::lock_guard lock(admit_mutex_);
  if (bounded && here + creating_ >= cluster_.capacity())
    return fail(not_ready_error("full: " + std::to_string(cluster_.capacity()) + " sandboxes (--capacity)"));
  ++creating_;
  return Admission(this);
}

bool ApiService::reserve_for_pool() {
  if (stopping_ || draining_) return false;
  auto ids = runtime_.store().ids();
  std::lock_guard lock(admit_mutex_);
  if (cluster_.capacity() && (ids ? ids->size() : 0) + creating_ >= cluster_.capacity()) return false;
  ++creating_;
  return true;
}

bool ApiService::forward_if_elsewhere(Exchange& x, const std::string& sandbox) {
  std::string shard = shard_of_id(sandbox);
  if (!shard.empty()) return shard != cluster_.shard() && forward_to(x, shard, sandbox);
  // A name: ours if we have it, else the peer's that says it has it. Links name ids, so
  // a request admitted by a link's signature alone never asks the peers.
  if (runtime_.store().resolve(sandbox) || !x.request().forwarded_by.empty() || !peers_ || !credentialed(x.request()))
    return false;
  for (const auto& peer : cluster_.listed_peers()) {
    auto url = cluster_.peer_url(peer);
    if (!url) continue;
    auto found = peers_->get_json(*url, "/v1/sandboxes/" + PeerClient::escape(sandbox), kNameLookupMs);
    if (found && found->first == 200) return forward_to(x, peer, sandbox);
  }
  return false;
}

bool ApiService::forward_to(Exchange& x, const std::string& shard, const std::string& sandbox) {
  const bool with_credential = credentialed(x.request());
  auto unavailable = [&](Error e) {
    metrics_.count_forward(false);
    Json doc = error_document(e);
    // Its last snapshot, when the store has one: the client can restore it elsewhere.
    // Asked for callers with a token only (a store lookup is not free).
    if (auto where = with_credential && !sandbox.empty() ? runtime_.sandbox_pointer(sandbox) : Result<SandboxPointer>(fail(e)); where) {
      if (where->moved) return x.respond(410, moved_document(sandbox, where->snapshot));
      doc["error"]["snapshot"] = where->snapshot;
    }
    x.respond(503, doc, {{"Retry-After", "5"}});
  };
  // A relayed request is never relayed again: a server that is told it owns a shard it
  // does not has peers configured differently from ours.
  if (!x.request().forwarded_by.empty()) {
    metrics_.count_forward(false);
    respond_error(x, make_error(ErrorCode::kOwnerUnavailable, "shard " + cluster_.shard() + " was sent a request for shard " + shard,
                                "the servers' --peers disagree"));
    return true;
  }
  auto url = cluster_.peer_url(shard);
  if (!url || !peers_) {
    unavailable(make_error(ErrorCode::kOwnerUnavailable, "no server is known for shard " + shard + " (--peers)"));
    return true;
  }
  ++relays_;
  auto sent = peers_->forward(x, *url, with_credential);
  --relays_;
  if (sent) {
    metrics_.count_forward(true);
    return true;
  }
  if (sent.error().code == ErrorCode::kOwnerUnavailable) unavailable(std::move(sent.error()));
  else respond_error(x, sent.error());
  return true;
}

bool ApiService::answer_if_moved(Exchange& x, const std::string& sandbox) {
  if (shard_of_id(sandbox) != cluster_.shard() || !credentialed(x.request()) || runtime_.store().resolve(sandbox)) return false;
  auto where = runtime_.sandbox_pointer(sandbox);
  if (!where || !where->moved) return false;
  x.respond(410, moved_document(sandbox, where->snapshot));
  return true;
}

void ApiService::livez(Exchange& x, const Call&) { x.respond(200, {{"live", true}}); }

void ApiService::readyz(Exchange& x, const Call&) {
  std::string reason;
  if (!ready(reason)) return x.respond(503, {{"ready", false}, {"reason", reason}});
  x.respond(200, {{"ready", true}});
}

// Without a token, so cheap: the records and the supervisors' locks, no supervisor asked,
// and those at most once a second (a scraper, or anybody, may ask in a loop: each answer
// would otherwise read every record of the state root).
void ApiService::metrics_route(Exchange& x, const Call&) {
  MetricsState s;
  std::string reason;
  s.ready = ready(reason);
  s.draining = draining_;
  s.capacity = cluster_.capacity();
  s.cells_running = static_cast<uint64_t>(std::max(0, running_cells_.load()));
  s.commands_running = static_cast<uint64_t>(std::max(0, running_calls_.load() - running_cells_.load()));
  {
    std::lock_guard lock(census_.mutex);
    const auto now = std::chrono::steady_clock::now();
    const uint64_t generation = census_generation_.load();
    if (census_.generation != generation || now - census_.taken >= std::chrono::seconds(1)) {
      census_.sandboxes.clear();
      census_.active = 0;
      const auto& store = runtime_.store();
      for (const auto& id : store.ids().value_or(std::vector<std::string>{})) {
        auto record = store.load(id);
        if (!record) continue;
        const char* status = store.supervisor_alive(id) ? "running" : record->facts.stopped_at.empty() ? "dead" : "stopped";
        ++census_.sandboxes[status][std::string(size_tier_name(record->spec.size))];
        if (record->facts.pool.empty()) ++census_.active;
      }
      census_.taken = now;
      census_.generation = generation;
    }
    s.sandboxes = census_.sandboxes;
    s.active = census_.active;
  }
  const Json pool = pool_ ? pool_->status() : Json{{"sizes", Json::object()}};
  for (const auto& [size, slot] : pool["sizes"].items()) {
      s.warm_ready[size] = slot.value("ready", uint64_t{0});
      s.warm_target[size] = slot.value("target", uint64_t{0});
      s.warm_building[size] = slot.value("building", false) ? 1 : 0;
    }
  s.free_slots = cluster_.capacity() ? cluster_.capacity() - std::min(cluster_.capacity(), sandboxes_here()) : 0;
  s.kernel_zygote_serving = kernel_zygote_ && kernel_zygote_->pid() != 0;
  s.kernel_zygote_starts = kernel_zygote_ ? static_cast<uint64_t>(kernel_zygote_->starts()) : 0;
  x.respond_text(200, metrics_.render(s), "text/plain; version=0.0.4; charset=utf-8");
}

void ApiService::drain_route(Exchange& x, const Call&) {
  if (!cluster_.sharded())
    return respond_error(x, make_error(ErrorCode::kUnsupported, "only a sharded server drains (nsbox serve --shard)",
                                       "stop this one with SIGTERM"));
  bool began = begin_drain();
  x.respond(202, {{"draining", true}, {"began", began}, {"grace_s", cluster_.drain_grace_s()}});
}

// The first signal begins the drain, a second ends its grace (cells and commands are cut
// when their sandboxes are snapshotted), a third stops the server as a plain one stops.
bool ApiService::on_stop_signal() {
  if (!cluster_.sharded()) return false;
  if (begin_drain()) return true;
  int n = ++stop_signals_;
  if (n == 1) {
    log::info("a second signal: the drain's grace ends now");
    hurry_ = true;
    return true;
  }
  log::warn("a third signal: stopping without finishing the drain (the sandboxes not yet moved stay here)");
  return false;
}

bool ApiService::begin_drain() {
  if (draining_.exchange(true)) return false;
  metrics_.count_drain();
  std::thread([this] { drain(); }).detach();
  return true;
}

// Readiness is off (draining_: creates refused, the pool reserves no more); then: the
// warm pool's free members go; cells, commands and relays get the grace; creates already
// admitted finish; then every sandbox is closed to new requests at once, its requests in
// flight waited for, stopped (nothing runs while it is copied), snapshotted with its
// files, marked moved in the store and removed; then the server stops. A sandbox whose
// snapshot or tombstone fails stays (nothing is lost; the log and drain.json say which,
// and the server exits 1).
void ApiService::drain() {
  const auto grace = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cluster_.drain_grace_s()));
  const auto deadline = Clock::now() + grace;
  auto waiting = [&](Clock::time_point until, auto busy) {
    while (busy() && Clock::now() < until && !hurry_) std::this_thread::sleep_for(100ms);
  };
  log::info("draining: no new sandboxes; cells and commands have " + std::to_string(int(cluster_.drain_grace_s())) + " s");
  stop_pool();
  waiting(deadline, [&] { return running_calls_ > 0 || relays_ > 0; });
  waiting(std::max(deadline, Clock::now() + 30s), [&] {
    std::lock_guard lock(admit_mutex_);
    return creating_ > 0;
  });
  size_t moved = 0, kept = 0;
  std::set<std::string> seen;
  // Again until nothing new: a create admitted before the drain may have finished late.
  for (int pass = 0; pass < 3; ++pass) {
    std::vector<std::string> ids;
    for (const auto& id : runtime_.store().ids().value_or(std::vector<std::string>{}))
      if (seen.insert(id).second) ids.push_back(id);
    if (ids.empty()) break;
    {
      std::unique_lock lock(gate_.mutex);
      gate_.closed.insert(ids.begin(), ids.end());
      gate_.idle.wait_until(lock, std::max(deadline, Clock::now() + 10s), [&] {
        for (const auto& id : ids)
          if (gate_.in_flight.count(id)) return false;
        return true;
      });
    }
    for (const auto& id : ids) {
      auto record = runtime_.store().load(id);
      if (!record || !record->facts.pool.empty()) continue;  // gone meanwhile, or another server's free member
      if (runtime_.store().supervisor_alive(id))
        if (auto stopped = runtime_.stop(id); !stopped) log::warn("drain: " + id + " could not be stopped first: " + stopped.error().message);
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
      if (auto removed = runtime_.remove(id); !removed)
        log::warn("drain: " + id + " moved to " + snap->id + " but not removed: " + removed.error().message);
      ++moved;
    }
  }
  drain_kept_ = kept;
  log::info("drained: " + std::to_string(moved) + " moved to snapshots" +
            (kept ? ", " + std::to_string(kept) + " kept here (see above)" : ""));
  Json result = {{"moved", moved}, {"kept", kept}};
  if (auto written = files::atomic_write(runtime_.store().root().data_dir + "/api/drain.json", result.dump() + "\n"); !written)
    log::warn("drain: " + written.error().message);
  {
    std::lock_guard lock(gate_.mutex);
    gate_.closed.clear();  // those kept answer again until the server stops
  }
  if (stop_server_) stop_server_();
}

}  // namespace nsbox::api
