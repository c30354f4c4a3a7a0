#include <catch2/catch.hpp>

#include "runtime/core/sandbox_accounts.h"
#include "runtime/core/sandbox_spec.h"

using nsbox::SandboxAccounts;
using Json = nsbox::protocol::Json;

TEST_CASE("declared users get ids from 1001 in order, around the ones given, and groups make their members users",
          "[accounts]") {
  auto a = SandboxAccounts::from_request(Json{"alice", {{"name", "bob"}, {"uid", 1001}}, {{"name", "carol"}}},
                                         Json{{{"name", "team"}, {"users", {"alice", "dave", {{"name", "user"}}}}}});
  REQUIRE(a);
  REQUIRE(a->users.size() == 4);
  CHECK(a->users[0].name == "alice");
  CHECK(a->users[0].uid == 1002);  // 1001 was bob's
  CHECK(a->users[1].uid == 1001);
  CHECK(a->users[2].uid == 1003);
  CHECK(a->users[3].name == "dave");  // a member not declared becomes a user
  CHECK(a->users[3].uid == 1004);
  REQUIRE(a->groups.size() == 1);
  CHECK(a->groups[0].gid == 1005);
  CHECK(a->groups[0].members == std::vector<std::string>{"alice", "dave", "user"});
  auto passwd = a->passwd_lines();
  CHECK(passwd.starts_with("nsbox:x:999:999:nsbox init:/nonexistent:/usr/sbin/nologin\n"));  // init's, no command's
  CHECK(passwd.find("alice:x:1002:1002:nsbox sandbox user:/home/alice:/bin/bash\n") != std::string::npos);
  CHECK(a->group_lines().find("team:x:1005:alice,dave,user\n") != std::string::npos);
  CHECK(a->uids() == std::vector<uint32_t>{999, 1002, 1001, 1003, 1004});
  CHECK(a->gids() == std::vector<uint32_t>{999, 1002, 1001, 1003, 1004, 1005});
  CHECK(SandboxAccounts{}.uids().empty());  // no accounts: one id, as ever
  CHECK(SandboxAccounts{}.passwd_lines().empty());

  auto alice = a->identity("alice");
  REQUIRE(alice);
  CHECK((alice->uid == 1002 && alice->gid == 1002 && alice->groups == std::vector<uint32_t>{1005}));
  auto user = a->identity("");
  REQUIRE(user);
  CHECK((user->name == "user" && user->uid == 1000 && user->groups == std::vector<uint32_t>{1005}));
  auto nobody = a->identity("mallory");
  REQUIRE_FALSE(nobody);
  CHECK(nobody.error().code == nsbox::ErrorCode::kNotFound);
  CHECK(nobody.error().message.find("user, alice, bob, carol, dave") != std::string::npos);
}

TEST_CASE("an account that would be root, the sandbox's own, a bad name, a shared id or one too many is refused",
          "[accounts]") {
  struct Case {
    Json users, groups;
    const char* says;
  };
  Json seventeen = Json::array();
  for (int i = 0; i < 17; ++i) seventeen.push_back("u" + std::to_string(i));
  for (const auto& c : std::vector<Case>{
           {Json{"root"}, nullptr, "one of the sandbox's own accounts"},
           {Json{"user"}, nullptr, "one of the sandbox's own accounts"},
           {Json{"nsbox"}, nullptr, "one of the sandbox's own accounts"},
           {nullptr, Json{{{"name", "alice"}, {"users", {"alice"}}}}, "has the name of a group"},
           {nullptr, Json{{{"name", "ops"}}, {{"name", "team"}, {"users", {"ops"}}}}, "has the name of a group"},
           {Json{{{"name", "a"}, {"uid", 0}}}, nullptr, "must be a number from 1001"},
           {Json{{{"name", "a"}, {"uid", 1000}}}, nullptr, "must be a number from 1001"},
           {Json{{{"name", "a"}, {"uid", 65534}}}, nullptr, "must be a number from 1001"},
           {Json{{{"name", "a"}, {"uid", -5}}}, nullptr, "must be a number from 1001"},
           {Json{"Alice"}, nullptr, "is not an account name"},
           {Json{"a:b"}, nullptr, "is not an account name"},
           {Json{"a\nroot"}, nullptr, "is not an account name"},
           {Json{"a", "a"}, nullptr, "declared twice"},
           {Json{{{"name", "a"}, {"uid", 1500}}, {{"name", "b"}, {"uid", 1500}}}, nullptr, "another account's"},
           {Json{"a"}, Json{{{"name", "a"}}}, "has the name of a user"},
           {nullptr, Json{{{"name", "g"}, {"gid", 1001}, {"users", {"x"}}}, {{"name", "h"}, {"gid", 1001}}}, "another account's"},
           {seventeen, nullptr, "more than 16 users"},
           {Json{{"name", "a"}}, nullptr, "must be a list"},
           {nullptr, Json{"g"}, "must be an object"},
       }) {
    INFO(c.users.dump() + " " + c.groups.dump());
    auto a = SandboxAccounts::from_request(c.users, c.groups);
    REQUIRE_FALSE(a);
    INFO(a.error().message);
    CHECK(a.error().code == nsbox::ErrorCode::kInvalidArgument);
    CHECK(a.error().message.find(c.says) != std::string::npos);
  }
}

TEST_CASE("a spec's accounts are kept in its record as users and groups, with their ids", "[accounts]") {
  nsbox::SandboxSpec spec;
  spec.accounts = *SandboxAccounts::from_request(Json{"alice"}, Json{{{"name", "ops"}, {"users", {"alice"}}}});
  Json j = spec.to_json();
  CHECK(j["users"] == Json{{{"name", "alice"}, {"uid", 1001}}});
  CHECK(j["groups"] == Json{{{"name", "ops"}, {"gid", 1002}, {"users", {"alice"}}}});
  auto back = nsbox::SandboxSpec::from_json(j);
  REQUIRE(back);
  CHECK(back->accounts.to_json() == spec.accounts.to_json());
  // A record written before accounts existed has none.
  j.erase("users");
  j.erase("groups");
  auto old = nsbox::SandboxSpec::from_json(j);
  REQUIRE(old);
  CHECK(old->accounts.empty());
}
