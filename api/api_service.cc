#include "api/api_service.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "api/http_errors.h"
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


bool ApiService::authorized(const HttpRequest& r, const Route* route) const {
  // No endpoint: 404 for the client, 401 for anybody else (as for every route of theirs).
  if (!route) return token_.accepts(r.authorization);
  switch (route->auth) {
    case Auth::kNone: return true;
    case Auth::kToken: return token_.accepts(r.authorization);
    case Auth::kSignedLink:
      // A signed download link carries its own authority, checked by get_file.
      if (r.query.count("signature")) return true;
      [[fallthrough]];
    case Auth::kPeerRelayable: return credentialed(r);
  }
  return false;
}

bool ApiService::credentialed(const HttpRequest& r) const {
  if (token_.accepts(r.authorization)) return true;
  // Another server relaying its client's request (it checked the client's token); the
  // route table says which routes peers relay (never the server's own: drain, pool,
  // creates, lists).
  return peer_token_ && !r.forwarded_by.empty() && peer_token_->accepts(r.authorization);
}

ApiService::Intake ApiService::intake(const HttpRequest& r) const {
  Intake in;
  if (tunnel_target(r, port_domain_)) {  // the client's token, as for the routes of its sandboxes
    in.tunnel = true;
    in.admitted = token_.accepts(r.authorization);
    return in;
  }
  RouteMatch m = routes().match(r.method, r.path);
  in.admitted = authorized(r, m.route);
  if (!m.route) return in;
  in.upload = m.route->body == Body::kFile;
  using K = RequestBudgets::Kind;
  if (m.route->auth == Auth::kSignedLink && r.query.count("signature")) {
    // A link's signature is its only authority: anyone holding one may open it as often
    // as they like, so a sandbox's links share one part of the open budget (a sandbox
    // mints links to its own files at will).
    in.budget = K::kOpen;
    in.budget_key = std::string(m.params[0]);
  } else if (m.route->budget != Budget::kRequests) {
    in.budget = m.route->budget == Budget::kProbes ? K::kProbe : K::kOpen;
    if (in.budget == K::kOpen) in.budget_key = m.route->pattern;
  }
  return in;
}

void ApiService::handle(Exchange& x) {
  const HttpRequest& r = x.request();
  if (auto t = tunnel_target(r, port_domain_)) {
    if (!token_.accepts(r.authorization)) return x.respond(401, error_document(unauthorized_error()), {{"WWW-Authenticate", "Bearer"}});
    return port_tunnel(x, *t);
  }
  RouteMatch m = routes().match(r.method, r.path);
  if (!authorized(r, m.route)) {
    x.respond(401, error_document(unauthorized_error()), {{"WWW-Authenticate", "Bearer"}});
    return;
  }
  if (!m.route) return respond_error(x, no_route(r));
  try {
    dispatch(x, m);
  } catch (const Json::exception& e) {
    // A field of the wrong type somewhere nlohmann was asked for it: the client's error.
    respond_error(x, make_error(ErrorCode::kMalformedRequest, std::string("a field of the wrong type: ") + e.what()));
  }
  // What may have changed the state root's sandboxes (a create, a claim, a removal...):
  // the next scrape counts them again rather than a census up to a second old.
  if (r.method != "GET") ++census_generation_;
}

void ApiService::dispatch(Exchange& x, const RouteMatch& m) {
  const Route& route = *m.route;
  Call call;
  switch (route.scope) {
    case Scope::kServer:
      call.arg = m.params[0];
      return (this->*route.handler)(x, call);
    case Scope::kSandbox:
      call.sandbox = std::string(m.params[0]);
      call.arg = m.params[1];
      return sandbox_call(x, route, call);
    case Scope::kSession:
    case Scope::kSessionSandbox: return session_call(x, route, m);
  }
}

void ApiService::sandbox_call(Exchange& x, const Route& route, const Call& call) {
  const std::string& sandbox = call.sandbox;
  // A request admitted by a link's signature alone is checked before a peer is asked or
  // even connected to: the shards of a set share the link key (api/server_main.cc), so any
  // of them can tell a forged link, whatever shard its id names.
  if (cluster_.sharded() && x.request().query.count("signature") && !credentialed(x.request()))
    if (auto signed_ok = check_link(x.request(), sandbox); !signed_ok) return respond_error(x, signed_ok.error());
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
  if (pool_ && pool_->is_free(sandbox) && !route.free_member_ok)
    return respond_error(x, free_member_error(sandbox, WarmPool::owner_tag()));
  (this->*route.handler)(x, call);
}

void ApiService::session_call(Exchange& x, const Route& route, const RouteMatch& m) {
  std::string sid(m.params[0]);
  // A session lives on the server that made it, as its sandbox does.
  if (cluster_.sharded())
    if (std::string shard = shard_of_session(sid); !shard.empty() && shard != cluster_.shard() && forward_to(x, shard, "")) return;
  auto session = sessions_.load(sid);
  if (!session) return respond_error(x, session.error());
  Call call;
  call.arg = m.params[1];
  if (route.scope == Scope::kSession) {
    call.session = &*session;
    return (this->*route.handler)(x, call);
  }
  // A sandbox's route, on the session's sandbox (made now if this is the first).
  auto sandbox = sandbox_of_session(sid);
  if (!sandbox) return respond_error(x, sandbox.error());
  call.sandbox = std::move(*sandbox);
  sandbox_call(x, route, call);
}

void ApiService::info(Exchange& x, const Call&) {
  x.respond(200, {{"api_version", 1},
                  {"version", kVersion},
                  {"features", {{"cells", true}, {"commands", true}, {"files", true}, {"fs", true}, {"sessions", true},
                                {"events", true}, {"tool_bridge", true}, {"workbench_tools", true}, {"stop_start", true}, {"snapshots", true}, {"pty", true}, {"warm_pool", true},
                                {"shards", cluster_.sharded()}}},
                  {"shard", cluster_.sharded() ? Json(cluster_.shard()) : Json(nullptr)},
                  {"limits", {{"max_upload_bytes", config_.max_upload_bytes}, {"max_json_bytes", kMaxJsonBody},
                              {"max_code_bytes", kMaxCodeBytes}, {"max_download_bytes", kMaxDownloadBytes}}}});
}

void ApiService::inspect_sandbox(Exchange& x, const Call& c) {
  auto info = runtime_.inspect(c.sandbox);
  return info ? x.respond(200, info->to_json()) : respond_error(x, info.error());
}

void ApiService::interrupt_sandbox(Exchange& x, const Call& c) {
  auto done = runtime_.interrupt(c.sandbox);
  return done ? x.respond(200, {{"interrupted", true}}) : respond_error(x, done.error());
}

void ApiService::restart_sandbox(Exchange& x, const Call& c) {
  auto done = runtime_.restart(c.sandbox);
  return done ? x.respond(200, {{"restarted", true}}) : respond_error(x, done.error());
}

void ApiService::stop_sandbox(Exchange& x, const Call& c) {
  auto stopped = runtime_.stop(c.sandbox);
  if (!stopped) return respond_error(x, stopped.error());
  Json j = stopped->to_json();
  j["kernel_state_lost"] = true;
  x.respond(200, j);
}

// A sandbox made here hands out its files (upload_local_file) as this server's signed
// links, which open here without a token until they expire.
void ApiService::hand_links(CreateOptions& options) const {
  options.launch.tool_keys.link_key = signer_.key();
  options.launch.tool_keys.link_base_url = config_.public_url;
}

// GET /v1/pool: its state; PUT /v1/pool {"sizes": {"standard": 4}}: new targets.
void ApiService::pool_status(Exchange& x, const Call&) {
  if (!pool_)  // an embedder's service that never called start_pool
    return x.respond(200, {{"sizes", Json::object()}, {"preload", Json::array()}, {"memory_merge", false}});
  x.respond(200, pool_->status());
}

void ApiService::set_pool(Exchange& x, const Call&) {
  if (!pool_) return respond_error(x, make_error(ErrorCode::kUnsupported, "this server has no warm pool"));
  auto body = body_object(x.request());
  if (!body) return respond_error(x, body.error());
  if (auto ok = only_fields(*body, {"sizes"}); !ok) return respond_error(x, ok.error());
  auto sizes = WarmPoolConfig::sizes_from_json(body->value("sizes", Json()));
  if (!sizes) return respond_error(x, sizes.error());
  pool_->set_targets(*sizes);
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

void ApiService::create_sandbox(Exchange& x, const Call&) {
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

// {"env": {...}}: env values again (never stored); credentials from the server's
// environment, as at create.
void ApiService::start_sandbox(Exchange& x, const Call& c) {
  auto body = body_object(x.request());  // {} when empty
  if (!body) return respond_error(x, body.error());
  auto options = start_options_from_json(*body, process_environment());
  if (!options) return respond_error(x, options.error());
  options->link_key = signer_.key();
  options->link_base_url = config_.public_url;
  auto info = runtime_.start(c.sandbox, *options);
  if (!info) return respond_error(x, info.error());
  x.respond(200, info->to_json());
}

void ApiService::list_sandboxes(Exchange& x, const Call&) {
  auto list = runtime_.list();
  if (!list) return respond_error(x, list.error());
  const bool all = x.request().query_value("all") == "true";
  Json arr = Json::array();
  for (const auto& info : *list)
    if (all || info.record.facts.pool.empty()) arr.push_back(info.to_json());  // the warm pool's free members only with ?all=true
  x.respond(200, {{"sandboxes", arr}});
}

// {"ttl_s": N}: the sandbox is removed N seconds from now (docs/semantics.md, "Time to
// live"); the answer is the sandbox, its expires_at with it.
void ApiService::set_ttl(Exchange& x, const Call& c) {
  auto body = body_object(x.request());
  if (!body) return respond_error(x, body.error());
  if (auto ok = only_fields(*body, {"ttl_s"}); !ok) return respond_error(x, ok.error());
  SandboxSpec asked;
  if (auto read = read_request_fields({{"ttl_s", body->value("ttl_s", Json())}}, asked); !read) return respond_error(x, read.error());
  auto info = runtime_.set_ttl(c.sandbox, asked.ttl_s);
  if (!info) return respond_error(x, info.error());
  x.respond(200, info->to_json());
}

void ApiService::patch_sandbox(Exchange& x, const Call& c) {
  const std::string& sandbox = c.sandbox;
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

void ApiService::delete_sandbox(Exchange& x, const Call& c) {
  auto info = runtime_.inspect(c.sandbox);
  if (!info) return respond_error(x, info.error());
  bool keep = x.request().query_value("keep_files") == "true";
  if (auto r = runtime_.remove(info->record.id, keep); !r) return respond_error(x, r.error());
  x.respond(200, {{"removed", Json::array({info->record.id})}});
}

}  // namespace nsbox::api
