// The accounts a sandbox declares besides `user` (docs/semantics.md, "Users"): the
// manifest's `users` and `groups`, as the Agents SDK writes them.
//
// Each user has an id of its own inside (1001 and up unless it names one) and a group of
// the same name and number; each inside id maps to a host id of its own
// (isolation/userns.h), never to the host's root, and no account is uid 0 inside. A
// command, process, PTY session or file call names one by `run_as`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "isolation/sys/error.h"
#include "runtime/protocol/frame.h"

namespace nsbox {

struct SandboxUser {
  std::string name;
  uint32_t uid = 0;  // its group's gid too
};

struct SandboxGroup {
  std::string name;
  uint32_t gid = 0;
  std::vector<std::string> members;  // user names ("user" included when listed)
};

// Who a process runs as: its name, ids and supplementary groups.
struct Identity {
  std::string name;
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> groups;

  // The spawn request's form (init's "identity"): {"name", "uid", "gid", "groups"}.
  protocol::Json to_json() const;
};

struct SandboxAccounts {
  static constexpr size_t kMaxUsers = 16;
  static constexpr size_t kMaxGroups = 16;
  static constexpr uint32_t kFirstId = 1001;
  static constexpr uint32_t kLastId = 59999;

  std::vector<SandboxUser> users;
  std::vector<SandboxGroup> groups;

  bool empty() const { return users.empty() && groups.empty(); }

  // From a request's (or a manifest's) "users" and "groups", either may be null: users as
  // "name" or {"name", "uid"?}, groups as {"name", "gid"?, "users": [name | {"name"}]}. A
  // group's member that is not declared becomes a user. Ids not given are the lowest free
  // ones from 1001, in order. Errors name the entry and the rule.
  static Result<SandboxAccounts> from_request(const protocol::Json& users, const protocol::Json& groups);
  // The record's form, {"users": [{name, uid}], "groups": [{name, gid, users}]}, and back.
  protocol::Json to_json() const;
  static Result<SandboxAccounts> from_record(const protocol::Json& j);

  // Who `run_as` names: "" and "user" are the sandbox user (with the groups that list it);
  // anyone else must be declared. The error lists who is.
  Result<Identity> identity(const std::string& run_as) const;
  // The inside ids mapped besides 1000 when there are accounts: init's (kSystemUid,
  // isolation/userns.h), every user's uid, and every user's and group's gid.
  std::vector<uint32_t> uids() const;
  std::vector<uint32_t> gids() const;
  // A user's home: a directory of its own that no other account can write (a tmpfs it
  // owns, mode 0700: kept while the sandbox runs, not across a stop).
  static std::string home_of(const std::string& name);
  // Lines for the sandbox's /etc/passwd and /etc/group, after user's own: nsbox (init's
  // id), then each user and group.
  std::string passwd_lines() const;
  std::string group_lines() const;
};

}  // namespace nsbox
