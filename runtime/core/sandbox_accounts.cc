#include "runtime/core/sandbox_accounts.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "isolation/userns.h"

namespace nsbox {
namespace {

using protocol::Json;

constexpr const char* kReservedNames[] = {"root", "user", "nobody", "nogroup", "nsbox"};

Error invalid(const std::string& message) { return make_error(ErrorCode::kInvalidArgument, message); }

// As useradd's default NAME_REGEX: a lowercase letter or '_', then up to 31 of those,
// digits and '-'.
bool plain_name(const std::string& name) {
  if (name.empty() || name.size() > 32) return false;
  if (!(std::islower(static_cast<unsigned char>(name[0])) || name[0] == '_')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

Result<std::string> name_of(const Json& entry, const std::string& what) {
  const Json* name = &entry;
  if (entry.is_object()) {
    auto it = entry.find("name");
    if (it == entry.end()) return fail(invalid(what + " has no \"name\""));
    name = &*it;
  }
  if (!name->is_string()) return fail(invalid(what + " must be a name or an object with a \"name\""));
  std::string text = name->get<std::string>();
  if (!plain_name(text))
    return fail(invalid(what + " \"" + text.substr(0, 64) +
                        "\" is not an account name (a lowercase letter or '_', then up to 31 of those, digits and '-')"));
  return text;
}

// An id the entry names under `key`, or 0 when it names none.
Result<uint32_t> id_of(const Json& entry, const char* key, const std::string& who) {
  if (!entry.is_object()) return 0u;
  auto it = entry.find(key);
  if (it == entry.end() || it->is_null()) return 0u;
  if (!it->is_number_integer() || it->get<int64_t>() < SandboxAccounts::kFirstId || it->get<int64_t>() > SandboxAccounts::kLastId)
    return fail(invalid(who + "'s \"" + key + "\" must be a number from " + std::to_string(SandboxAccounts::kFirstId) + " to " +
                        std::to_string(SandboxAccounts::kLastId) + " (1000 is user's; 0, root, is never mapped)"));
  return static_cast<uint32_t>(it->get<int64_t>());
}

// Hands out the ids entries left unset, lowest free first, and refuses any given twice.
class IdPool {
 public:
  Result<void> claim(uint32_t id, const std::string& who) {
    if (!taken_.insert(id).second) return fail(invalid(who + "'s id " + std::to_string(id) + " is another account's"));
    return {};
  }
  uint32_t next() {
    while (taken_.count(next_)) ++next_;
    taken_.insert(next_);
    return next_;
  }

 private:
  std::set<uint32_t> taken_;
  uint32_t next_ = SandboxAccounts::kFirstId;
};

Result<void> check_new_name(const std::string& name, std::set<std::string>& names, const std::string& what) {
  if (std::find(std::begin(kReservedNames), std::end(kReservedNames), name) != std::end(kReservedNames))
    return fail(invalid(what + " \"" + name + "\" is one of the sandbox's own accounts (root, user, nobody, nogroup, nsbox)"));
  if (!names.insert(name).second) return fail(invalid(what + " \"" + name + "\" is declared twice"));
  return {};
}

}  // namespace

Json Identity::to_json() const { return {{"name", name}, {"uid", uid}, {"gid", gid}, {"groups", groups}}; }

Result<SandboxAccounts> SandboxAccounts::from_request(const Json& users, const Json& groups) {
  if (!users.is_null() && !users.is_array()) return fail(invalid("\"users\" must be a list"));
  if (!groups.is_null() && !groups.is_array()) return fail(invalid("\"groups\" must be a list"));
  SandboxAccounts out;
  std::set<std::string> user_names, group_names;
  IdPool ids;
  std::vector<size_t> unset_users, unset_groups;
  auto add_user = [&](const std::string& name, uint32_t uid) -> Result<void> {
    if (group_names.count(name)) return fail(invalid("user \"" + name + "\" has the name of a group (each user has a group of its own name)"));
    NSBOX_CHECK(check_new_name(name, user_names, "user"));
    if (out.users.size() == kMaxUsers) return fail(invalid("more than " + std::to_string(kMaxUsers) + " users"));
    if (uid) NSBOX_CHECK(ids.claim(uid, "user " + name));
    else unset_users.push_back(out.users.size());
    out.users.push_back({name, uid});
    return {};
  };
  for (const auto& u : users.is_array() ? users : Json::array()) {
    std::string name = NSBOX_TRY(name_of(u, "a user"));
    NSBOX_CHECK(add_user(name, NSBOX_TRY(id_of(u, "uid", "user " + name))));
  }
  for (const auto& g : groups.is_array() ? groups : Json::array()) {
    if (!g.is_object()) return fail(invalid("a group must be an object with a \"name\""));
    std::string name = NSBOX_TRY(name_of(g, "a group"));
    if (user_names.count(name)) return fail(invalid("group \"" + name + "\" has the name of a user (each user has a group of its own name)"));
    NSBOX_CHECK(check_new_name(name, group_names, "group"));
    if (out.groups.size() == kMaxGroups) return fail(invalid("more than " + std::to_string(kMaxGroups) + " groups"));
    SandboxGroup group{name, NSBOX_TRY(id_of(g, "gid", "group " + name)), {}};
    if (auto members = g.find("users"); members != g.end() && !members->is_null()) {
      if (!members->is_array()) return fail(invalid("group \"" + name + "\"'s \"users\" must be a list"));
      for (const auto& m : *members) {
        std::string member = NSBOX_TRY(name_of(m, "a member of group " + name));
        if (member != "user" && !user_names.count(member)) NSBOX_CHECK(add_user(member, 0));
        if (std::find(group.members.begin(), group.members.end(), member) == group.members.end()) group.members.push_back(member);
      }
    }
    if (group.gid) NSBOX_CHECK(ids.claim(group.gid, "group " + name));
    else unset_groups.push_back(out.groups.size());
    out.groups.push_back(std::move(group));
  }
  for (size_t i : unset_users) out.users[i].uid = ids.next();
  for (size_t i : unset_groups) out.groups[i].gid = ids.next();
  return out;
}

Json SandboxAccounts::to_json() const {
  Json u = Json::array(), g = Json::array();
  for (const auto& user : users) u.push_back({{"name", user.name}, {"uid", user.uid}});
  for (const auto& group : groups) g.push_back({{"name", group.name}, {"gid", group.gid}, {"users", group.members}});
  return {{"users", u}, {"groups", g}};
}

Result<SandboxAccounts> SandboxAccounts::from_record(const Json& j) {
  if (j.is_null()) return SandboxAccounts{};
  auto accounts = from_request(j.value("users", Json()), j.value("groups", Json()));
  if (!accounts) return fail(make_error(ErrorCode::kInternal, "corrupt sandbox record: accounts: " + accounts.error().message));
  return accounts;
}

Result<Identity> SandboxAccounts::identity(const std::string& run_as) const {
  Identity id;
  if (run_as.empty() || run_as == "user") {
    id = {"user", userns::kSandboxUid, userns::kSandboxGid, {}};
  } else {
    auto it = std::find_if(users.begin(), users.end(), [&](const SandboxUser& u) { return u.name == run_as; });
    if (it == users.end()) {
      std::string known = "user";
      for (const auto& u : users) known += ", " + u.name;
      return fail(make_error(ErrorCode::kNotFound, "no user \"" + run_as.substr(0, 64) + "\" in this sandbox (it has " + known + ")",
                             "accounts are declared at create: \"users\" in the create document or its manifest (nsbox create --user NAME)"));
    }
    id = {it->name, it->uid, it->uid, {}};
  }
  for (const auto& g : groups)
    if (std::find(g.members.begin(), g.members.end(), id.name) != g.members.end()) id.groups.push_back(g.gid);
  return id;
}

std::vector<uint32_t> SandboxAccounts::uids() const {
  if (empty()) return {};
  std::vector<uint32_t> out = {userns::kSystemUid};
  for (const auto& u : users) out.push_back(u.uid);
  return out;
}

std::vector<uint32_t> SandboxAccounts::gids() const {
  std::vector<uint32_t> out = uids();
  for (const auto& g : groups) out.push_back(g.gid);
  return out;
}

std::string SandboxAccounts::home_of(const std::string& name) { return "/home/" + name; }

std::string SandboxAccounts::passwd_lines() const {
  if (empty()) return "";
  std::string out = "nsbox:x:" + std::to_string(userns::kSystemUid) + ":" + std::to_string(userns::kSystemGid) +
                    ":nsbox init:/nonexistent:/usr/sbin/nologin\n";
  for (const auto& u : users)
    out += u.name + ":x:" + std::to_string(u.uid) + ":" + std::to_string(u.uid) + ":nsbox sandbox user:" + home_of(u.name) +
           ":/bin/bash\n";
  return out;
}

std::string SandboxAccounts::group_lines() const {
  if (empty()) return "";
  std::string out = "nsbox:x:" + std::to_string(userns::kSystemGid) + ":\n";
  for (const auto& u : users) out += u.name + ":x:" + std::to_string(u.uid) + ":\n";
  for (const auto& g : groups) {
    out += g.name + ":x:" + std::to_string(g.gid) + ":";
    for (size_t i = 0; i < g.members.size(); ++i) out += (i ? "," : "") + g.members[i];
    out += "\n";
  }
  return out;
}

}  // namespace nsbox
