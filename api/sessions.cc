#include "api/sessions.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <unistd.h>

#include <set>

#include "isolation/sys/files.h"
#include "isolation/sys/rfc3339.h"
#include "isolation/sys/syscall.h"
#include "isolation/sys/unique_fd.h"
#include "runtime/core/state_store.h"
#include "runtime/core/state_store.h"

namespace nsbox::api {
namespace {

using nlohmann::json;

Error malformed(std::string m) { return make_error(ErrorCode::kMalformedRequest, std::move(m)); }

std::string new_session_id(const std::string& shard) {
  static const char kAlphabet[] = "0123456789abcdefghijklmnopqrstuvwxyz";
  unsigned char bytes[12];
  while (::getrandom(bytes, sizeof bytes, 0) != static_cast<ssize_t>(sizeof bytes)) {}
  std::string id = shard.empty() ? "ses-" : "ses-" + shard + "-";
  for (unsigned char b : bytes) id += kAlphabet[b % 36];
  return id;
}

// ses-[<shard>-]<12 of a-z0-9>
bool valid_session_id(const std::string& id) {
  if (id.size() < 16 || !id.starts_with("ses-")) return false;
  std::string_view tail = std::string_view(id).substr(id.size() - 12);
  for (char c : tail)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z'))) return false;
  return id.size() == 16 || (id[id.size() - 13] == '-' && validate_shard(id.substr(4, id.size() - 17)));
}

}  // namespace

std::string shard_of_session(const std::string& id) {
  return valid_session_id(id) && id.size() > 16 ? id.substr(4, id.size() - 17) : "";
}

namespace {

Error no_session(const std::string& id) {
  return make_error(ErrorCode::kNotFound, "no session '" + id + "'", "`GET /v1/sessions` lists the sessions");
}

}  // namespace

json Session::to_json() const {
  return {{"session_id", id},
          {"user_id", user_id},
          {"sandbox", {{"enable", sandbox_enabled}, {"sandbox_size", size_tier_name(size)}}},
          {"sandbox_id", sandbox_id.empty() ? json(nullptr) : json(sandbox_id)},
          {"created_at", created_at}};
}

Result<Session> Session::from_json(const json& j) {
  try {
    Session s;
    s.id = j.at("session_id").get<std::string>();
    s.user_id = j.value("user_id", "");
    s.sandbox_enabled = j.at("sandbox").value("enable", true);
    s.size = NSBOX_TRY(parse_size_tier(j.at("sandbox").value("sandbox_size", "standard")));
    if (j.contains("sandbox_id") && j["sandbox_id"].is_string()) s.sandbox_id = j["sandbox_id"].get<std::string>();
    s.created_at = j.value("created_at", "");
    return s;
  } catch (const json::exception& e) {
    return fail(make_error(ErrorCode::kProtocol, std::string("malformed session file: ") + e.what()));
  }
}

Result<Session> SessionStore::create(const json& body) const {
  if (!body.is_object()) return fail(malformed("a session is a JSON object"));
  static const std::set<std::string> kFields = {"user_id", "sandbox", "workbench"};
  for (const auto& [k, v] : body.items())
    if (!kFields.count(k)) return fail(malformed("unknown field \"" + k + "\""));
  if (body.contains("sandbox") && body.contains("workbench"))
    return fail(malformed("give \"sandbox\" or its alias \"workbench\", not both"));
  Session s;
  s.id = new_session_id(shard_);
  s.created_at = sys::now_rfc3339();
  if (auto u = body.find("user_id"); u != body.end()) {
    if (!u->is_string()) return fail(malformed("\"user_id\" must be a string"));
    s.user_id = u->get<std::string>();
    if (s.user_id.size() > 256) return fail(make_error(ErrorCode::kInvalidArgument, "\"user_id\" is longer than 256 bytes"));
  }
  auto sb = body.find("sandbox");
  if (sb == body.end()) sb = body.find("workbench");
  if (sb != body.end()) {
    if (!sb->is_object()) return fail(malformed("\"sandbox\" must be an object"));
    for (const auto& [k, v] : sb->items()) {
      if (k == "enable") {
        if (!v.is_boolean()) return fail(malformed("\"sandbox.enable\" must be true or false"));
        s.sandbox_enabled = v.get<bool>();
      } else if (k == "sandbox_size") {
        if (!v.is_string()) return fail(malformed("\"sandbox.sandbox_size\" must be a string"));
        s.size = NSBOX_TRY(parse_size_tier(v.get<std::string>()));
      } else {
        return fail(malformed("unknown field \"sandbox." + k + "\""));
      }
    }
  }
  NSBOX_CHECK(files::ensure_private_dir(dir_));
  NSBOX_CHECK(save(s));
  return s;
}

Result<Session> SessionStore::load(const std::string& id) const {
  if (!valid_session_id(id)) return fail(no_session(id));
  auto text = files::read_file(path(id), 1 << 16);
  if (!text) return fail(no_session(id));
  json j = json::parse(*text, nullptr, false);
  if (j.is_discarded()) return fail(make_error(ErrorCode::kProtocol, "session file of " + id + " is not JSON"));
  return Session::from_json(j);
}

Result<std::vector<Session>> SessionStore::list() const {
  std::vector<Session> out;
  if (!files::exists(dir_)) return out;
  for (const auto& name : NSBOX_TRY(files::list_dir(dir_)))
    if (name.ends_with(".json"))
      if (auto s = load(name.substr(0, name.size() - 5))) out.push_back(std::move(*s));
  return out;
}

Result<void> SessionStore::save(const Session& s) const { return files::atomic_write(path(s.id), s.to_json().dump(2) + "\n", 0600); }

Result<void> SessionStore::remove(const std::string& id) const {
  if (!valid_session_id(id) || ::unlink(path(id).c_str()) != 0) return fail(no_session(id));
  ::unlink((path(id) + ".lock").c_str());
  return {};
}

Result<std::string> SessionStore::sandbox_of(const std::string& id, const std::function<Result<std::string>(const Session&)>& make) const {
  Session s = NSBOX_TRY(load(id));
  if (!s.sandbox_enabled)
    return fail(make_error(ErrorCode::kSandboxDisabled, "session " + id + " was created without a sandbox",
                           "create a session with {\"sandbox\": {\"enable\": true}}"));
  if (!s.sandbox_id.empty()) return s.sandbox_id;
  auto lock = files::lock_exclusive(path(id) + ".lock");
  if (!lock) return fail(std::move(lock.error()).context("lock session " + id));
  s = NSBOX_TRY(load(id));  // another request may have made it while we waited
  if (!s.sandbox_id.empty()) return s.sandbox_id;
  s.sandbox_id = NSBOX_TRY(make(s));
  NSBOX_CHECK(save(s));
  return s.sandbox_id;
}

}  // namespace nsbox::api
