// Snapshots (POST /v1/snapshots {"sandbox", "name", "include_files"}; GET
// /v1/snapshots[/{snapshot}]; DELETE /v1/snapshots/{snapshot}, by id or name) and sessions
// in Composio's shape (api/sessions.h): their own routes here; the routes of a session's
// sandbox are the sandbox's (api/routes.h).
#include "api/api_service.h"

namespace nsbox::api {

void ApiService::list_snapshots(Exchange& x, const Call&) {
  auto list = runtime_.snapshots();
  if (!list) return respond_error(x, list.error());
  Json arr = Json::array();
  for (const auto& s : *list) arr.push_back(s.to_json());
  x.respond(200, {{"snapshots", arr}});
}

void ApiService::take_snapshot(Exchange& x, const Call&) {
  auto body = body_object(x.request());
  if (!body) return respond_error(x, body.error());
  if (auto ok = only_fields(*body, {"sandbox", "name", "include_files"}); !ok) return respond_error(x, ok.error());
  const Json& b = *body;
  if (!b.contains("sandbox") || !b["sandbox"].is_string() || (b.contains("name") && !b["name"].is_string()) ||
      (b.contains("include_files") && !b["include_files"].is_boolean()))
    return respond_error(x, make_error(ErrorCode::kMalformedRequest,
                                       "POST /v1/snapshots takes {\"sandbox\": ID, \"name\": NAME, \"include_files\": false}"));
  const std::string sandbox = b["sandbox"].get<std::string>();
  // A snapshot is taken where its sandbox is; not of one a drain is moving (its own
  // snapshot and tombstone are the last word).
  if (cluster_.sharded() && forward_if_elsewhere(x, sandbox)) return;
  {
    std::lock_guard lock(gate_.mutex);
    if (gate_.closed.count(runtime_.store().resolve(sandbox).value_or("")))
      return respond_error(x, make_error(ErrorCode::kUnavailable, "sandbox " + sandbox + " is being drained to a snapshot"));
  }
  auto made = runtime_.snapshot(sandbox, b.value("name", ""), b.value("include_files", false));
  if (!made) return respond_error(x, made.error());
  x.respond(201, made->to_json(), {{"Location", "/v1/snapshots/" + made->id}});
}

void ApiService::get_snapshot(Exchange& x, const Call& c) {
  auto found = runtime_.find_snapshot(std::string(c.arg));
  return found ? x.respond(200, found->to_json()) : respond_error(x, found.error());
}

void ApiService::delete_snapshot(Exchange& x, const Call& c) {
  auto found = runtime_.find_snapshot(std::string(c.arg));
  if (!found) return respond_error(x, found.error());
  if (auto removed = runtime_.remove_snapshot(found->id); !removed) return respond_error(x, removed.error());
  x.respond(200, {{"removed", Json::array({found->id})}});
}

void ApiService::create_session(Exchange& x, const Call&) {
  auto body = body_object(x.request());
  if (!body) return respond_error(x, body.error());
  auto s = sessions_.create(*body);
  return s ? x.respond(201, s->to_json(), {{"Location", "/v1/sessions/" + s->id}}) : respond_error(x, s.error());
}

void ApiService::list_sessions(Exchange& x, const Call&) {
  auto list = sessions_.list();
  if (!list) return respond_error(x, list.error());
  Json arr = Json::array();
  for (const auto& s : *list) arr.push_back(s.to_json());
  x.respond(200, {{"sessions", arr}});
}

void ApiService::get_session(Exchange& x, const Call& c) { x.respond(200, c.session->to_json()); }

void ApiService::delete_session(Exchange& x, const Call& c) {
  const Session& session = *c.session;
  if (!session.sandbox_id.empty())
    if (auto removed = runtime_.remove(session.sandbox_id); !removed && removed.error().code != ErrorCode::kNotFound)
      return respond_error(x, removed.error());
  if (auto removed = sessions_.remove(session.id); !removed) return respond_error(x, removed.error());
  x.respond(200, {{"removed", Json::array({session.id})}});
}

Result<std::string> ApiService::sandbox_of_session(const std::string& sid) {
  return sessions_.sandbox_of(sid, [&](const Session& s) -> Result<std::string> {
    CreateOptions o;
    o.spec.size = s.size;
    hand_links(o);
    auto admitted = NSBOX_TRY(admit(o.spec.size));
    auto info = NSBOX_TRY(make_sandbox(o, /*warm_ok=*/true));
    return info.record.id;
  });
}

// {"sandbox_size": "large"} or {"sandbox": {"sandbox_size": ...}}: a live resize of the
// session's sandbox (made first if it was not yet).
void ApiService::patch_session(Exchange& x, const Call& c) {
  Session& session = *c.session;
  auto sandbox = sandbox_of_session(session.id);
  if (!sandbox) return respond_error(x, sandbox.error());
  auto body = body_object(x.request());
  if (!body) return respond_error(x, body.error());
  const Json& fields = body->contains("sandbox") ? (*body)["sandbox"] : *body;
  if (!fields.is_object() || !fields.contains("sandbox_size") || !fields["sandbox_size"].is_string())
    return respond_error(x, make_error(ErrorCode::kMalformedRequest, "PATCH takes {\"sandbox_size\": \"large\"}"));
  auto size = parse_size_tier(fields["sandbox_size"].get<std::string>());
  if (!size) return respond_error(x, size.error());
  if (auto resized = runtime_.resize(*sandbox, *size); !resized) return respond_error(x, resized.error());
  session.size = *size;
  session.sandbox_id = *sandbox;
  if (auto saved = sessions_.save(session); !saved) return respond_error(x, saved.error());
  x.respond(200, session.to_json());
}

// The session's sandbox's document (made first if it was not yet).
void ApiService::session_sandbox(Exchange& x, const Call& c) {
  auto sandbox = sandbox_of_session(c.session->id);
  if (!sandbox) return respond_error(x, sandbox.error());
  auto info = runtime_.inspect(*sandbox);
  return info ? x.respond(200, info->to_json()) : respond_error(x, info.error());
}

}  // namespace nsbox::api
