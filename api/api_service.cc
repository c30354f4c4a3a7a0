#include "api/api_service.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "api/http_errors.h"
#include "api/request_target.h"
#include "isolation/sys/log.h"

namespace nsbox::api {
namespace {

Error no_route(const HttpRequest& r) {
  return make_error(ErrorCode::kNotFound, "no endpoint " + r.method + " " + r.path, "docs/api.md lists the endpoints");
}

const char* kVersion = "0.1.0";

}  // namespace

Error unauthorized_error() {
  return make_error(ErrorCode::kUnauthorized, "a bearer token is needed",
                    "send Authorization: Bearer <the token in the server's token_file>");
}

void respond_error(Exchange& x, const Error& e) { x.respond(http_status(e.code), error_document(e)); }

Result<Json> body_object(const HttpRequest& r) {
  if (r.body.empty()) return Json::object();
  if (protocol::nests_deeper_than(r.body, 64))
    return fail(make_error(ErrorCode::kMalformedRequest, "the request body nests deeper than 64 levels"));
  Json j = Json::parse(r.body, nullptr, false);
  if (j.is_discarded()) return fail(make_error(ErrorCode::kMalformedRequest, "the request body is not JSON"));
  if (!j.is_object()) return fail(make_error(ErrorCode::kMalformedRequest, "the request body must be a JSON object"));
  return j;
}

Result<void> only_fields(const Json& j, std::initializer_list<const char*> known) {
  for (const auto& [key, value] : j.items()) {
    bool ok = false;
    for (const char* k : known) ok = ok || key == k;
    if (!ok) return fail(make_error(ErrorCode::kMalformedRequest, "unknown field \"" + key + "\""));
  }
  return {};
}

Result<double> timeout_field(const Json& j, double fallback) {
  auto it = j.find("timeout_s");
  if (it == j.end()) return fallback;
  if (!it->is_number()) return fail(make_error(ErrorCode::kMalformedRequest, "\"timeout_s\" must be a number"));
  double v = it->get<double>();
  if (!(v > 0) || v > 86400 || std::isnan(v))
    return fail(make_error(ErrorCode::kInvalidArgument, "\"timeout_s\" must be in (0, 86400]"));
  return v;
}

bool ApiService::takes_upload(const HttpRequest& r) const {
  if (r.method != "PUT") return false;
  auto path = split_path(r.path);
  if (path.empty()) return false;
  const std::string& last = path.back();
  return last == "files" || last == "fs" || last == "fs:extract";
}

bool ApiService::authorized(const HttpRequest& r, const Path& path) const {
  // Probes and the metrics' scrape: no token (counts only: no id, name or content).
  if (r.method == "GET" && path.size() == 1 && (path[0] == "livez" || path[0] == "readyz" || path[0] == "metrics")) return true;
  // A signed download link carries its own authority, checked by get_file.
  if (r.method == "GET" && path.size() == 4 && path[0] == "v1" && path[1] == "sandboxes" && path[3] == "files" &&
      r.query.count("signature"))
    return true;
  return credentialed(r);
}

bool ApiService::credentialed(const HttpRequest& r) const {
  if (token_.accepts(r.authorization)) return true;
  // Another server relaying its client's request (it checked the client's token): only
  // what peers relay, a sandbox's routes and a snapshot of one, never the server's own
  // (drain, pool, creates, lists).
  if (!peer_token_ || r.forwarded_by.empty() || !peer_token_->accepts(r.authorization)) return false;
  Path path = split_path(r.path);
  return path.size() >= 2 && path[0] == "v1" &&
         ((path.size() >= 3 && (path[1] == "sandboxes" || path[1] == "sessions")) || (path[1] == "snapshots" && path.size() == 2 && r.method == "POST"));
}

bool ApiService::admits(const HttpRequest& r) const { return authorized(r, split_path(r.path)); }

void ApiService::handle(Exchange& x) {
  const HttpRequest& r = x.request();
  Path path = split_path(r.path);
  if (!authorized(r, path)) {
    x.respond(401, error_document(unauthorized_error()), {{"WWW-Authenticate", "Bearer"}});
    return;
  }
  try {
    route(x, path);
  } catch (const Json::exception& e) {
    // A field of the wrong type somewhere nlohmann was asked for it: the client's error.
    respond_error(x, make_error(ErrorCode::kMalformedRequest, std::string("a field of the wrong type: ") + e.what()));
  }
}

void ApiService::route(Exchange& x, const Path& path) {
  const HttpRequest& r = x.request();
  const std::string& m = r.method;
  if (path.size() == 1 && m == "GET" && path[0] == "livez") return x.respond(200, {{"live", true}});
  if (path.size() == 1 && m == "GET" && path[0] == "readyz") {
    std::string reason;
    if (!ready(reason)) return x.respond(503, {{"ready", false}, {"reason", reason}});
    return x.respond(200, {{"ready", true}});
  }
  if (path.size() == 1 && m == "GET" && path[0] == "metrics") return metrics_route(x);
  if (path.empty() || path[0] != "v1") return respond_error(x, no_route(r));
  if (path.size() == 2 && path[1] == "info" && m == "GET")
    return x.respond(200, {{"api_version", 1},
                           {"version", kVersion},
                           {"features", {{"cells", true}, {"commands", true}, {"files", true}, {"fs", true}, {"sessions", true},
                                         {"events", true}, {"tool_bridge", true}, {"workbench_tools", true}, {"stop_start", true}, {"snapshots", true}, {"pty", true}, {"warm_pool", true},
                                         {"shards", cluster_.sharded()}}},
                           {"shard", cluster_.sharded() ? Json(cluster_.shard()) : Json(nullptr)},
                           {"limits", {{"max_upload_bytes", config_.max_upload_bytes}, {"max_json_bytes", kMaxJsonBody},
                                       {"max_code_bytes", kMaxCodeBytes}, {"max_download_bytes", kMaxDownloadBytes}}}});
  if (path.size() == 2 && path[1] == "pool") return pool_route(x);
  if (path.size() == 2 && path[1] == "drain" && m == "POST") return drain_route(x);
  if (path.size() >= 2 && path[1] == "sessions") return route_sessions(x, path);
  if (path.size() >= 2 && path[1] == "snapshots") return route_snapshots(x, Path(path.begin() + 2, path.end()));
  if (path.size() < 2 || path[1] != "sandboxes") return respond_error(x, no_route(r));
  if (path.size() == 2 && m == "POST") return create_sandbox(x);
  if (path.size() == 2 && m == "GET") return list_sandboxes(x);
  if (path.size() >= 3) return route_sandbox(x, path[2], Path(path.begin() + 3, path.end()));
  respond_error(x, no_route(r));
}

// Everything under /v1/sandboxes/{id}/, and the same under /v1/sessions/{sid}/.
void ApiService::route_sandbox(Exchange& x, const std::string& sandbox, const Path& rest) {
  const HttpRequest& r = x.request();
  const std::string& m = r.method;
  if (cluster_.sharded() && (forward_if_elsewhere(x, sandbox) || answer_if_moved(x, sandbox))) return;
  // Counted while it runs, so that a drain snapshots a sandbox only once nothing
  // acknowledged to a client can still change it; refused once the drain has closed it.
  std::string id = runtime_.store().resolve(sandbox).value_or(sandbox);
  {
    std::lock_guard lock(gate_.mutex);
    if (gate_.closed.count(id)) {
      return respond_error(x, make_error(ErrorCode::kUnavailable, "sandbox " + id + " is being drained to a snapshot",
                                         "retry in a few seconds: the answer will name the snapshot to restore"));
    }
    ++gate_.in_flight[id];
  }
  struct Leave {
    Gate& g;
    std::string id;
    ~Leave() {
      std::lock_guard lock(g.mutex);
      if (--g.in_flight[id] <= 0) g.in_flight.erase(id);
      g.idle.notify_all();
    }
  } leave{gate_, id};
  // A free member of the warm pool is nobody's yet: nothing may be put in it before the
  // create that claims it (which would find it), nor taken out.
  if (pool_ && pool_->is_free(sandbox) && !(rest.empty() && m == "GET"))
    return respond_error(x, free_member_error(sandbox, WarmPool::owner_tag()));
  if (rest.empty()) {
    if (m == "GET") {
      auto info = runtime_.inspect(sandbox);
      return info ? x.respond(200, info->to_json()) : respond_error(x, info.error());
    }
    if (m == "PATCH") return patch_sandbox(x, sandbox);
    if (m == "DELETE") return delete_sandbox(x, sandbox);
    return respond_error(x, no_route(r));
  }
  if (rest.size() == 2 && rest[0] == "tools" && m == "POST") return run_workbench_tool(x, sandbox, rest[1]);
  if (rest.size() == 2 && rest[0] == "tool_calls" && m == "POST") return answer_tool_call(x, sandbox, rest[1]);
  if (rest.size() == 1 && rest[0] == "events" && m == "GET") return tool_events(x, sandbox);
  if (!rest.empty() && rest[0] == "pty") return pty_route(x, sandbox, Path(rest.begin() + 1, rest.end()));
  if (rest.size() != 1) return respond_error(x, no_route(r));
  const std::string& what = rest[0];
  if (m == "POST" && (what == "interrupt" || what == "restart")) {
    auto done = what == "interrupt" ? runtime_.interrupt(sandbox) : runtime_.restart(sandbox);
    if (!done) return respond_error(x, done.error());
    return x.respond(200, {{what == "interrupt" ? "interrupted" : "restarted", true}});
  }
  if (m == "POST" && what == "stop") {
    auto stopped = runtime_.stop(sandbox);
    if (!stopped) return respond_error(x, stopped.error());
    Json j = stopped->to_json();
    j["kernel_state_lost"] = true;
    return x.respond(200, j);
  }
  if (m == "POST" && what == "start") return start_sandbox(x, sandbox);
  if (m == "POST" && (what == "cells" || what == "commands")) {
    const bool cell = what == "cells";
    ++running_calls_;
    if (cell) ++running_cells_;
    struct Done {
      std::atomic<int>& n;
      std::atomic<int>* cells;
      ~Done() {
        --n;
        if (cells) --*cells;
      }
    } done{running_calls_, cell ? &running_cells_ : nullptr};
    return cell ? run_cell(x, sandbox) : run_command(x, sandbox);
  }
  if (what == "files") {
    if (m == "PUT") return put_file(x, sandbox);
    if (m == "GET") return get_file(x, sandbox);
    if (m == "DELETE") return delete_file(x, sandbox);
  }
  if (what == "files:ls" && m == "GET") return list_files(x, sandbox);
  if (what == "files:sign" && m == "POST") return sign_file(x, sandbox);
  if (what == "fs" || what.starts_with("fs:")) return fs_route(x, sandbox, what);
  respond_error(x, no_route(r));
}

// A sandbox made here hands out its files (upload_local_file) as this server's signed
// links, which open here without a token until they expire.
void ApiService::hand_links(CreateOptions& options) const {
  options.launch.tool_keys.link_key = signer_.key();
  options.launch.tool_keys.link_base_url = config_.public_url;
}

// GET /v1/pool: its state; PUT /v1/pool {"sizes": {"standard": 4}}: new targets.
void ApiService::pool_route(Exchange& x) {
  const std::string& m = x.request().method;
  if (!pool_)  // an embedder's service that never called start_pool
    return m == "GET" ? x.respond(200, {{"sizes", Json::object()}, {"preload", Json::array()}, {"memory_merge", false}})
                      : respond_error(x, make_error(ErrorCode::kUnsupported, "this server has no warm pool"));
  if (m == "PUT") {
    auto body = body_object(x.request());
    if (!body) return respond_error(x, body.error());
    if (auto ok = only_fields(*body, {"sizes"}); !ok) return respond_error(x, ok.error());
    auto sizes = WarmPoolConfig::sizes_from_json(body->value("sizes", Json()));
    if (!sizes) return respond_error(x, sizes.error());
    pool_->set_targets(*sizes);
  } else if (m != "GET") {
    return respond_error(x, no_route(x.request()));
  }
  x.respond(200, pool_->status());
}

void ApiService::start_pool(WarmPoolConfig config) {
  WarmPool::sweep_orphans(runtime_);
  auto base = [this](SizeTier size) -> Result<CreateOptions> {
    auto options = NSBOX_TRY(create_options_from_json({{"size", size_tier_name(size)}}, process_environment(), Caller::kRemote));
    hand_links(options);
    return options;
  };
  pool_ = std::make_unique<WarmPool>(
      runtime_, std::move(config), base, [this] { return running_calls_ > 0; }, [this] { return reserve_for_pool(); },
      [this] {
        std::lock_guard lock(admit_mutex_);
        --creating_;
      });
  pool_->start();
}

void ApiService::stop_pool() {
  if (pool_) pool_->stop();
}

namespace {

// Whether a warm pool's member can serve a create. A member is what a create document
// naming only its size makes (the server's tools config included): a create whose spec
// differs from that in nothing but its name can be one (its env goes to the claim), and
// any other option, today's or one added later, makes the create cold.
bool poolable(const CreateOptions& o) {
  // A member's kernel started long before the claim: variables read at a process's start
  // would reach later commands but not it. (Nor does a member wait for a first cell to
  // start its kernel: that is an option of the spec, compared below.)
  auto read_at_start = [](const auto& kv) { return env_read_at_process_start(kv.first); };
  if (!o.workspace.empty() || std::any_of(o.launch.env.begin(), o.launch.env.end(), read_at_start)) return false;
  auto member = create_options_from_json({{"size", size_tier_name(o.spec.size)}}, process_environment(), Caller::kRemote);
  if (!member) return false;
  Json asked = o.spec.to_json(), made = member->spec.to_json();
  asked.erase("name");
  made.erase("name");
  return asked == made;
}

}  // namespace

Result<SandboxInfo> ApiService::make_sandbox(const CreateOptions& options, bool warm_ok) {
  if (warm_ok && pool_ && pool_->serves(options.spec.size)) {
    // Two tries at most: a failure that is the host's (disk, load) must not drain the pool.
    for (int attempt = 0; attempt < 2; ++attempt) {
      auto id = pool_->take(options.spec.size);
      if (!id) break;
      auto info = runtime_.claim(*id, options.spec.name, options.launch.env);
      if (info) return info;
      if (info.error().code == ErrorCode::kInvalidArgument || info.error().code == ErrorCode::kAlreadyExists) {
        pool_->give_back(options.spec.size, *id);  // the caller's name or env: the member is untouched
        return info;
      }
      log::warn("warm pool member " + *id + " could not be claimed: " + info.error().message);
      pool_->discard(*id);
    }
  }
  return runtime_.create(options);  // the cold path
}

void ApiService::create_sandbox(Exchange& x) {
  const auto began = std::chrono::steady_clock::now();
  auto body = body_object(x.request());
  if (!body) return respond_error(x, body.error());
  auto options = create_options_from_json(*body, process_environment(), Caller::kRemote);
  if (!options) return respond_error(x, options.error());
  hand_links(*options);
  const bool warm_ok = poolable(*options);
  // Not ready (draining, full): said at once, so that a load balancer's retry finds a
  // server that is.
  auto admitted = admit(warm_ok ? std::optional<SizeTier>(options->spec.size) : std::nullopt);
  if (!admitted) {
    options->launch.wipe();
    return x.respond(503, error_document(admitted.error()), {{"Retry-After", "1"}});
  }
  auto info = make_sandbox(*options, warm_ok);
  options->launch.wipe();
  if (!info) return respond_error(x, info.error());
  metrics_.observe_create(info->record.facts.create_path == "warm",
                          std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
  x.respond(201, info->to_json(), {{"Location", "/v1/sandboxes/" + info->record.id}});
}

// PTY sessions: POST .../pty {argv|command, cols, rows} -> {session_id};
// POST .../pty/{sid}/input {chars, yield_ms}; GET .../pty/{sid}/output?yield_ms=;
// POST .../pty/{sid}/resize {cols, rows}; DELETE .../pty/{sid}; DELETE .../pty (all).
void ApiService::pty_route(Exchange& x, const std::string& sandbox, const Path& rest) {
  const HttpRequest& r = x.request();
  const std::string& m = r.method;
  auto number = [](const Json& j, const char* key, uint64_t fallback) -> Result<uint64_t> {
    auto it = j.find(key);
    if (it == j.end()) return fallback;
    if (!it->is_number_unsigned()) return fail(make_error(ErrorCode::kMalformedRequest, std::string("\"") + key + "\" must be a number"));
    return it->get<uint64_t>();
  };
  if (rest.empty() && m == "POST") {
    auto body = body_object(r);
    if (!body) return respond_error(x, body.error());
    if (auto ok = only_fields(*body, {"argv", "command", "cols", "rows", "env"}); !ok) return respond_error(x, ok.error());
    PtyStart start;
    if (auto it = body->find("command"); it != body->end() && it->is_string()) start.argv = {"/bin/bash", "-c", it->get<std::string>()};
    else if (auto a = body->find("argv"); a != body->end() && a->is_array())
      for (const auto& arg : *a)
        if (arg.is_string()) start.argv.push_back(arg.get<std::string>());
    if (start.argv.empty())
      return respond_error(x, make_error(ErrorCode::kMalformedRequest, "a PTY session needs \"argv\" (a list) or \"command\" (a bash line)"));
    auto cols = number(*body, "cols", 80), rows = number(*body, "rows", 24);
    if (!cols || !rows) return respond_error(x, !cols ? cols.error() : rows.error());
    start.cols = static_cast<unsigned>(std::min<uint64_t>(*cols, 100000));
    start.rows = static_cast<unsigned>(std::min<uint64_t>(*rows, 100000));
    if (auto e = body->find("env"); e != body->end() && e->is_object())
      for (const auto& [k, v] : e->items())
        if (v.is_string()) start.env.emplace_back(k, v.get<std::string>());
    auto sid = runtime_.pty_start(sandbox, start);
    if (!sid) return respond_error(x, sid.error());
    return x.respond(201, {{"session_id", *sid}});
  }
  if (rest.empty() && m == "DELETE") {
    auto killed = runtime_.pty_kill(sandbox, 0);
    return killed ? x.respond(200, {{"killed", *killed}}) : respond_error(x, killed.error());
  }
  if (rest.empty()) return respond_error(x, no_route(r));
  char* end = nullptr;
  uint64_t sid = std::strtoull(rest[0].c_str(), &end, 10);
  if (rest[0].empty() || *end != '\0' || sid == 0)
    return respond_error(x, make_error(ErrorCode::kNotFound, "no PTY session '" + rest[0] + "'"));
  if (rest.size() == 1 && m == "DELETE") {
    auto killed = runtime_.pty_kill(sandbox, sid);
    return killed ? x.respond(200, {{"killed", *killed}}) : respond_error(x, killed.error());
  }
  if (rest.size() != 2) return respond_error(x, no_route(r));
  if (rest[1] == "output" && m == "GET") {
    std::string text = r.query_value("yield_ms", "250");
    char* stop = nullptr;
    uint64_t yield = std::strtoull(text.c_str(), &stop, 10);
    if (text.empty() || *stop != '\0') return respond_error(x, make_error(ErrorCode::kMalformedRequest, "yield_ms must be a number"));
    auto o = runtime_.pty_read(sandbox, sid, yield);
    return o ? x.respond(200, o->to_json()) : respond_error(x, o.error());
  }
  if (m != "POST") return respond_error(x, no_route(r));
  auto body = body_object(r);
  if (!body) return respond_error(x, body.error());
  if (rest[1] == "input") {
    if (auto ok = only_fields(*body, {"chars", "chars_b64", "yield_ms"}); !ok) return respond_error(x, ok.error());
    std::string chars;
    if (auto it = body->find("chars_b64"); it != body->end() && it->is_string()) {
      auto decoded = protocol::base64_decode(it->get<std::string>());
      if (!decoded) return respond_error(x, make_error(ErrorCode::kMalformedRequest, "\"chars_b64\" is not base64"));
      chars = std::move(*decoded);
    } else if (auto c = body->find("chars"); c != body->end() && c->is_string()) {
      chars = c->get<std::string>();
    } else {
      return respond_error(x, make_error(ErrorCode::kMalformedRequest, "input needs \"chars\" (text) or \"chars_b64\""));
    }
    auto yield = number(*body, "yield_ms", 250);
    if (!yield) return respond_error(x, yield.error());
    auto o = runtime_.pty_write(sandbox, sid, chars, *yield);
    return o ? x.respond(200, o->to_json()) : respond_error(x, o.error());
  }
  if (rest[1] == "resize") {
    auto cols = number(*body, "cols", 80), rows = number(*body, "rows", 24);
    if (!cols || !rows) return respond_error(x, !cols ? cols.error() : rows.error());
    auto done = runtime_.pty_resize(sandbox, sid, static_cast<unsigned>(std::min<uint64_t>(*cols, 100000)),
                                    static_cast<unsigned>(std::min<uint64_t>(*rows, 100000)));
    return done ? x.respond(200, {{"resized", true}}) : respond_error(x, done.error());
  }
  respond_error(x, no_route(r));
}

// POST /v1/snapshots {"sandbox", "name", "include_files"}; GET /v1/snapshots[/{id}];
// DELETE /v1/snapshots/{id}. Ids or names.
void ApiService::route_snapshots(Exchange& x, const Path& rest) {
  const std::string& m = x.request().method;
  if (rest.empty() && m == "GET") {
    auto list = runtime_.snapshots();
    if (!list) return respond_error(x, list.error());
    Json arr = Json::array();
    for (const auto& s : *list) arr.push_back(s.to_json());
    return x.respond(200, {{"snapshots", arr}});
  }
  if (rest.empty() && m == "POST") {
    auto body = body_object(x.request());
    if (!body) return respond_error(x, body.error());
    if (auto ok = only_fields(*body, {"sandbox", "name", "include_files"}); !ok) return respond_error(x, ok.error());
    const Json& b = *body;
    if (!b.contains("sandbox") || !b["sandbox"].is_string() || (b.contains("name") && !b["name"].is_string()) ||
        (b.contains("include_files") && !b["include_files"].is_boolean()))
      return respond_error(x, make_error(ErrorCode::kMalformedRequest,
                                         "POST /v1/snapshots takes {\"sandbox\": ID, \"name\": NAME, \"include_files\": false}"));
    // A snapshot is taken where its sandbox is; not of one a drain is moving (its own
    // snapshot and tombstone are the last word).
    if (cluster_.sharded() && forward_if_elsewhere(x, b["sandbox"].get<std::string>())) return;
    {
      std::lock_guard lock(gate_.mutex);
      if (gate_.closed.count(runtime_.store().resolve(b["sandbox"].get<std::string>()).value_or("")))
        return respond_error(x, make_error(ErrorCode::kUnavailable, "sandbox " + b["sandbox"].get<std::string>() + " is being drained to a snapshot"));
    }
    auto made = runtime_.snapshot(b["sandbox"].get<std::string>(), b.value("name", ""), b.value("include_files", false));
    if (!made) return respond_error(x, made.error());
    return x.respond(201, made->to_json(), {{"Location", "/v1/snapshots/" + made->id}});
  }
  if (rest.size() == 1 && (m == "GET" || m == "DELETE")) {
    auto found = runtime_.find_snapshot(rest[0]);
    if (!found) return respond_error(x, found.error());
    if (m == "GET") return x.respond(200, found->to_json());
    if (auto removed = runtime_.remove_snapshot(found->id); !removed) return respond_error(x, removed.error());
    return x.respond(200, {{"removed", Json::array({found->id})}});
  }
  respond_error(x, no_route(x.request()));
}

// {"env": {...}}: env values again (never stored); credentials from the server's
// environment, as at create.
void ApiService::start_sandbox(Exchange& x, const std::string& sandbox) {
  auto body = body_object(x.request());  // {} when empty
  if (!body) return respond_error(x, body.error());
  auto options = start_options_from_json(*body, process_environment());
  if (!options) return respond_error(x, options.error());
  options->link_key = signer_.key();
  options->link_base_url = config_.public_url;
  auto info = runtime_.start(sandbox, *options);
  if (!info) return respond_error(x, info.error());
  x.respond(200, info->to_json());
}

void ApiService::list_sandboxes(Exchange& x) {
  auto list = runtime_.list();
  if (!list) return respond_error(x, list.error());
  const bool all = x.request().query_value("all") == "true";
  Json arr = Json::array();
  for (const auto& info : *list)
    if (all || info.record.facts.pool.empty()) arr.push_back(info.to_json());  // the warm pool's free members only with ?all=true
  x.respond(200, {{"sandboxes", arr}});
}

void ApiService::patch_sandbox(Exchange& x, const std::string& sandbox) {
  auto body = body_object(x.request());
  if (!body) return respond_error(x, body.error());
  if (auto ok = only_fields(*body, {"size", "net"}); !ok) return respond_error(x, ok.error());
  const bool has_size = body->contains("size"), has_net = body->contains("net");
  if ((!has_size && !has_net) || (has_size && !(*body)["size"].is_string()) || (has_net && !(*body)["net"].is_object()))
    return respond_error(x, make_error(ErrorCode::kMalformedRequest,
                                       "PATCH takes {\"size\": \"large\"} and/or {\"net\": {\"allow\": [...], \"allow_private\": [...]}}"));
  // Both checked before either is applied.
  std::optional<SizeTier> size;
  if (has_size) {
    auto parsed = parse_size_tier((*body)["size"].get<std::string>());
    if (!parsed) return respond_error(x, parsed.error());
    size = *parsed;
  }
  std::optional<net::AllowList> allow;
  if (has_net) {
    auto parsed = net::AllowList::from_json((*body)["net"]);
    if (!parsed) return respond_error(x, parsed.error());
    allow = std::move(*parsed);
  }
  if (size)
    if (auto resized = runtime_.resize(sandbox, *size); !resized) return respond_error(x, resized.error());
  if (allow)
    if (auto changed = runtime_.set_allowlist(sandbox, *allow); !changed) return respond_error(x, changed.error());
  auto info = runtime_.inspect(sandbox);
  if (!info) return respond_error(x, info.error());
  x.respond(200, info->to_json());
}

void ApiService::delete_sandbox(Exchange& x, const std::string& sandbox) {
  auto info = runtime_.inspect(sandbox);
  if (!info) return respond_error(x, info.error());
  bool keep = x.request().query_value("keep_files") == "true";
  if (auto r = runtime_.remove(info->record.id, keep); !r) return respond_error(x, r.error());
  x.respond(200, {{"removed", Json::array({info->record.id})}});
}

void ApiService::route_sessions(Exchange& x, const Path& path) {
  const HttpRequest& r = x.request();
  const std::string& m = r.method;
  if (path.size() == 2) {
    if (m == "POST") {
      auto body = body_object(r);
      if (!body) return respond_error(x, body.error());
      auto s = sessions_.create(*body);
      return s ? x.respond(201, s->to_json(), {{"Location", "/v1/sessions/" + s->id}}) : respond_error(x, s.error());
    }
    if (m == "GET") {
      auto list = sessions_.list();
      if (!list) return respond_error(x, list.error());
      Json arr = Json::array();
      for (const auto& s : *list) arr.push_back(s.to_json());
      return x.respond(200, {{"sessions", arr}});
    }
    return respond_error(x, no_route(r));
  }
  const std::string& sid = path[2];
  // A session lives on the server that made it, as its sandbox does.
  if (cluster_.sharded())
    if (std::string shard = shard_of_session(sid); !shard.empty() && shard != cluster_.shard() && forward_to(x, shard, "")) return;
  auto session = sessions_.load(sid);
  if (!session) return respond_error(x, session.error());
  if (path.size() == 3 && m == "GET") return x.respond(200, session->to_json());
  if (path.size() == 3 && m == "DELETE") {
    if (!session->sandbox_id.empty())
      if (auto removed = runtime_.remove(session->sandbox_id); !removed && removed.error().code != ErrorCode::kNotFound)
        return respond_error(x, removed.error());
    if (auto removed = sessions_.remove(sid); !removed) return respond_error(x, removed.error());
    return x.respond(200, {{"removed", Json::array({sid})}});
  }
  // Every sandbox call, on the session's sandbox (made now if this is the first).
  auto sandbox = sessions_.sandbox_of(sid, [&](const Session& s) -> Result<std::string> {
    CreateOptions o;
    o.spec.size = s.size;
    hand_links(o);
    auto admitted = NSBOX_TRY(admit(o.spec.size));
    auto info = NSBOX_TRY(make_sandbox(o, /*warm_ok=*/true));
    return info.record.id;
  });
  if (!sandbox) return respond_error(x, sandbox.error());
  if (path.size() == 3 && m == "PATCH") {
    // {"sandbox_size": "large"} or {"sandbox": {"sandbox_size": ...}}: a live resize.
    auto body = body_object(r);
    if (!body) return respond_error(x, body.error());
    const Json& fields = body->contains("sandbox") ? (*body)["sandbox"] : *body;
    if (!fields.is_object() || !fields.contains("sandbox_size") || !fields["sandbox_size"].is_string())
      return respond_error(x, make_error(ErrorCode::kMalformedRequest, "PATCH takes {\"sandbox_size\": \"large\"}"));
    auto size = parse_size_tier(fields["sandbox_size"].get<std::string>());
    if (!size) return respond_error(x, size.error());
    if (auto resized = runtime_.resize(*sandbox, *size); !resized) return respond_error(x, resized.error());
    session->size = *size;
    session->sandbox_id = *sandbox;
    if (auto saved = sessions_.save(*session); !saved) return respond_error(x, saved.error());
    return x.respond(200, session->to_json());
  }
  if (path.size() == 4 && path[3] == "sandbox" && m == "GET") {
    auto info = runtime_.inspect(*sandbox);
    return info ? x.respond(200, info->to_json()) : respond_error(x, info.error());
  }
  route_sandbox(x, *sandbox, Path(path.begin() + 3, path.end()));
}

}  // namespace nsbox::api
