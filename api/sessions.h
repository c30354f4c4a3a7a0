// Sessions in Composio's shape: `POST /v1/sessions {user_id, sandbox: {enable,
// sandbox_size}}`. A session's sandbox is made on its first use and goes with the session;
// a session made with `enable: false` answers every sandbox call with 400
// `sandbox_disabled`. Kept as files under <data>/api/sessions (0600), so every server of a
// state root, and a restarted one, sees the same sessions.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "isolation/size_tier.h"
#include "isolation/sys/error.h"

namespace nsbox::api {

struct Session {
  std::string id;  // ses-...
  std::string user_id;
  bool sandbox_enabled = true;
  SizeTier size = SizeTier::kStandard;
  std::string sandbox_id;  // empty until first use
  std::string created_at;

  nlohmann::json to_json() const;
  static Result<Session> from_json(const nlohmann::json& j);
};

// The shard a session id names (a sharded server's: ses-<shard>-<random>); "" otherwise.
std::string shard_of_session(const std::string& id);

class SessionStore {
 public:
  // `shard`: a sharded server's (its sessions' ids carry it, as its sandboxes' do).
  explicit SessionStore(std::string dir, std::string shard = "") : dir_(std::move(dir)), shard_(std::move(shard)) {}

  // From a request body: {user_id?, sandbox|workbench: {enable?, sandbox_size?}}.
  Result<Session> create(const nlohmann::json& body) const;
  Result<Session> load(const std::string& id) const;
  Result<std::vector<Session>> list() const;
  Result<void> save(const Session& s) const;
  Result<void> remove(const std::string& id) const;

  // The session's sandbox id, made by `make` on first use. One maker at a time per
  // session (a lock on its file), so two first requests do not make two sandboxes.
  Result<std::string> sandbox_of(const std::string& id, const std::function<Result<std::string>(const Session&)>& make) const;

 private:
  std::string path(const std::string& id) const { return dir_ + "/" + id + ".json"; }
  std::string dir_, shard_;
};

}  // namespace nsbox::api
