#include "runtime/toolbridge/composio_remote.h"

#include <algorithm>
#include <cctype>

#include "mounts/bucket/sigv4.h"
#include "runtime/toolbridge/remote_call.h"

namespace nsbox::tools {
namespace {

using protocol::Json;

constexpr size_t kMaxSchemas = 4096;

http::Limits limits_for(const ToolsConfig& c) {
  http::Limits l;
  l.request_timeout_ms = static_cast<int>(c.call_timeout_s + 0.999) * 1000;
  l.stall_timeout_s = l.request_timeout_ms / 1000;  // a slow tool may say nothing for a while
  return l;
}

// A slug names a tool in the remote's URL path: only what tool slugs are made of, so that
// neither " COMPOSIO_SEARCH" (a meta-tool once the remote trims it) nor ".." (another
// path of the API, reached with the key) gets there.
bool is_tool_slug(const std::string& slug) {
  if (slug.empty() || slug.size() > 256) return false;
  for (char c : slug)
    if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

ToolAnswer not_a_slug(const std::string& slug) {
  return ToolAnswer::failed(Json(slug.substr(0, 64)).dump() +
                            ": not a tool slug (upper-case letters, digits and '_', as GITHUB_LIST_REPOS)");
}

// What a proxied request may say. The user is the sandbox's configured one, whatever the
// sandbox sends: choosing it would act with another user's connected accounts.
constexpr const char* kProxyFields[] = {"endpoint", "method", "body", "parameters", "connected_account_id"};
constexpr const char* kProxyMethods[] = {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"};

Result<Json> proxy_body(const Json& request, const std::string& user_id) {
  auto refuse = [](const std::string& why) { return fail(make_error(ErrorCode::kInvalidArgument, "proxy_execute: " + why)); };
  Json body = Json::object();
  for (const auto& [key, value] : request.items()) {
    if (key == "user_id") {
      if (!value.is_null() && value != Json(user_id))
        return refuse("the user is this sandbox's configured one (--user-id); it cannot be chosen from inside the sandbox");
      continue;
    }
    if (std::find(std::begin(kProxyFields), std::end(kProxyFields), key) == std::end(kProxyFields))
      return refuse("unknown field " + Json(key.substr(0, 64)).dump() + " (endpoint, method, body, parameters, connected_account_id)");
    body[key] = value;
  }
  const Json& endpoint = body.contains("endpoint") ? body["endpoint"] : Json();
  if (!endpoint.is_string() || endpoint.get<std::string>().empty()) return refuse("the endpoint must be a non-empty string (\"/user/repos\")");
  std::string method = body.contains("method") && body["method"].is_string() ? body["method"].get<std::string>() : "";
  std::transform(method.begin(), method.end(), method.begin(), [](unsigned char c) { return std::toupper(c); });
  if (std::find(std::begin(kProxyMethods), std::end(kProxyMethods), method) == std::end(kProxyMethods))
    return refuse("the method must be one of GET, POST, PUT, PATCH, DELETE, HEAD");
  body["method"] = method;
  body["user_id"] = user_id;
  return body;
}

std::string base_of(const ToolsConfig& c) {
  std::string base = c.base_url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  return base;
}

}  // namespace

ComposioRemote::ComposioRemote(const ToolsConfig& config, std::string api_key)
    : config_(config), api_key_(std::move(api_key)), http_({.limits = limits_for(config)}) {}

http::Headers ComposioRemote::headers() const { return {{"x-api-key", api_key_}}; }

ToolAnswer ComposioRemote::answer_of(const std::string& what, const Result<RemoteReply>& reply) {
  if (!reply) return ToolAnswer::failed(what + ": " + reply.error().message);
  const RemoteReply& r = *reply;
  if (r.status == 401 || r.status == 403)
    return ToolAnswer::failed(what + ": the tool service refused the API key (HTTP " + std::to_string(r.status) +
                              "); check COMPOSIO_API_KEY where nsbox runs");
  if (r.status == 429)
    return ToolAnswer::failed(what + ": the tool service is rate-limiting (HTTP 429, " + std::to_string(kRateLimitTries) +
                              " tries); wait, or make fewer calls at once");
  if (r.status < 200 || r.status > 299)
    return ToolAnswer::failed(what + ": the tool service answered HTTP " + std::to_string(r.status) + ": " + remote_message(r));
  if (!r.body.is_object()) return ToolAnswer::failed(what + ": the tool service's answer is not a JSON object");
  const Json& b = r.body;
  std::string kind = b.value("result_type", "");
  if (kind.empty() && b.contains("data") && b["data"].is_object()) kind = b["data"].value("result_type", "");
  if (kind == "input_required" || kind == "approval_required")
    return ToolAnswer::failed(what + ": the tool needs input or an approval before it can run (" + kind + "): " +
                              remote_message(r));
  const Json& error = b.contains("error") ? b["error"] : Json();
  bool successful = b.value("successful", error.is_null());
  if (!successful || !error.is_null()) {
    std::string message = error.is_string() ? error.get<std::string>() : error.is_null() ? "it failed" : remote_message(r);
    return ToolAnswer::failed(message.empty() ? what + ": it failed" : message);
  }
  return ToolAnswer::ok(b.contains("data") ? b["data"] : Json::object());
}

ToolAnswer ComposioRemote::execute(const std::string& slug, const Json& arguments) {
  if (!is_tool_slug(slug)) return not_a_slug(slug);
  std::string path = config_.execute_path;
  path.replace(path.find("{slug}"), 6, bucket::uri_encode(slug));
  Json body = {{"arguments", arguments}, {"user_id", config_.user_id}};
  return answer_of(slug, call_remote(http_, "POST", base_of(config_) + path, headers(), body, config_.call_timeout_s));
}

ToolAnswer ComposioRemote::proxy(const Json& request) {
  auto body = proxy_body(request, config_.user_id);
  if (!body) return ToolAnswer::failed(body.error().message);
  return answer_of("proxy_execute", call_remote(http_, "POST", base_of(config_) + "/api/v3/tools/execute/proxy", headers(),
                                                *body, config_.call_timeout_s));
}

Result<Json> ComposioRemote::list(const std::string& toolkit, const std::string& search) {
  std::string url = base_of(config_) + config_.list_path;
  std::string sep = url.find('?') == std::string::npos ? "?" : "&";
  if (!toolkit.empty()) url += std::exchange(sep, "&") + "toolkit_slug=" + bucket::uri_encode(toolkit);
  if (!search.empty()) url += sep + "search=" + bucket::uri_encode(search);
  RemoteReply r = NSBOX_TRY(call_remote(http_, "GET", url, headers(), nullptr, config_.call_timeout_s));
  if (r.status < 200 || r.status > 299)
    return fail(make_error(ErrorCode::kRemote, "list the tools: the tool service answered HTTP " + std::to_string(r.status) +
                                                   ": " + remote_message(r)));
  const Json items = r.body.is_object() && r.body.contains("items") ? r.body["items"] : Json();
  if (!items.is_array()) return fail(make_error(ErrorCode::kRemote, "list the tools: the answer has no \"items\" list"));
  std::lock_guard lock(schemas_mutex_);
  for (const Json& item : items)
    if (item.is_object() && item.contains("slug") && item["slug"].is_string() && schemas_.size() < kMaxSchemas)
      schemas_[item["slug"].get<std::string>()] = item.value("input_parameters", Json());
  return items;
}

Json ComposioRemote::schema(const std::string& slug) {
  if (!is_tool_slug(slug)) return nullptr;
  {
    std::lock_guard lock(schemas_mutex_);
    if (auto it = schemas_.find(slug); it != schemas_.end()) return it->second;
  }
  // Once per slug: a search by the slug itself, remembered even when it finds nothing.
  (void)list("", slug);
  std::lock_guard lock(schemas_mutex_);
  auto it = schemas_.find(slug);
  if (it != schemas_.end()) return it->second;
  if (schemas_.size() < kMaxSchemas) schemas_.emplace(slug, Json());
  return nullptr;
}

}  // namespace nsbox::tools
