// The manifest's parse (runtime/client/manifest.h, runtime/client/create_options.h): where mounts go,
// what a remote caller may not name, and what is refused before anything is made.
#include <catch2/catch.hpp>
#include <map>

#include "runtime/client/create_options.h"
#include "runtime/client/manifest.h"
#include "runtime/protocol/frame.h"

using nsbox::protocol::Json;

namespace {

const nsbox::LocalSourceRoots kRoots{"/srv/m", {"/data/shared"}};

nsbox::Result<nsbox::Manifest> parse(const Json& entries) {
  return nsbox::parse_manifest_v1({{"version", 1}, {"entries", entries}}, kRoots);
}

}  // namespace

TEST_CASE("a manifest's mount entries are placed by their key, or mount_path, read-only unless said", "[manifest]") {
  auto m = parse({{"data", {{"type", "s3"}, {"bucket", "b"}, {"description", "d"}, {"permissions", "0700"}}},
                  {"rel", {{"type", "gcs"}, {"bucket", "g"}, {"mount_path", "x/y"}, {"mount_strategy", "rclone"}}},
                  {"abs", {{"type", "azure_blob"}, {"container", "box"}, {"account", "acct"}, {"mount_path", "/mnt/az"}}}});
  REQUIRE(m);
  REQUIRE(m->mounts.size() == 3);
  // nlohmann's objects keep their keys sorted: abs, data, rel.
  CHECK(m->mounts[0]["mount_path"] == "/mnt/az");
  CHECK(m->mounts[1]["mount_path"] == "/home/user/data");
  CHECK(m->mounts[2]["mount_path"] == "/home/user/x/y");
  CHECK(m->mounts[2]["strategy"] == "rclone");
  CHECK_FALSE(m->mounts[1].contains("description"));
  auto o = nsbox::create_options_from_json(
      {{"manifest", {{"entries", {{"data", {{"type", "s3"}, {"bucket", "b"}}},
                                  {"rel", {{"type", "gcs"}, {"bucket", "g"}, {"mount_path", "x/y"}, {"mount_strategy", "rclone"}}},
                                  {"abs", {{"type", "azure_blob"}, {"container", "box"}, {"account", "acct"}, {"mount_path", "/mnt/az"}}}}}}}},
      {}, nsbox::Caller::kRemote);
  INFO((o ? std::string() : o.error().message));
  REQUIRE(o);
  REQUIRE(o->spec.mounts.size() == 3);
  CHECK(o->launch.mount_credentials.size() == 3);
  std::map<std::string, const nsbox::bucket::BucketMount*> by_path;
  for (const auto& m : o->spec.mounts) by_path[m.mount_path] = &m;
  REQUIRE(by_path.count("/home/user/data"));
  REQUIRE(by_path.count("/home/user/x/y"));
  REQUIRE(by_path.count("/mnt/az"));
  CHECK(by_path["/home/user/data"]->read_only);
  CHECK(by_path["/home/user/x/y"]->strategy == nsbox::bucket::MountStrategy::kRclone);
  CHECK(o->workspace.empty());
}

TEST_CASE("host sources resolve against the manifest's directory or a grant, and never from a remote caller", "[manifest]") {
  auto m = parse({{"a", {{"type", "local_file"}, {"src", "x/./a.txt"}}},
                  {"b", {{"type", "local_dir"}, {"src", "/data/shared/tree"}}},
                  {"c", {{"type", "git_repo"}, {"repo", "openai/openai-agents-python"}, {"ref", "v1.0"}}},
                  {"d", {{"type", "git_repo"}, {"repo", "file:///srv/m/r.git"}}}});
  REQUIRE(m);
  REQUIRE(m->entries.size() == 4);
  CHECK(m->entries[0].source == "/srv/m/x/a.txt");
  CHECK(m->entries[1].source == "/data/shared/tree");
  CHECK(m->entries[2].source == "https://github.com/openai/openai-agents-python");
  CHECK(m->entries[3].source == "/srv/m/r.git");
  for (const Json& bad : {Json{{"type", "local_file"}, {"src", "/srv/mx/a"}}, Json{{"type", "git_repo"}, {"repo", "file:///etc"}},
                          Json{{"type", "local_dir"}, {"src", "/"}}}) {
    auto r = parse({{"x", bad}});
    REQUIRE_FALSE(r);
    CHECK(r.error().code == nsbox::ErrorCode::kPermissionDenied);
  }
  auto remote = nsbox::create_options_from_json({{"manifest", {{"entries", {{"a", {{"type", "local_file"}, {"src", "a"}}}}}}}}, {},
                                                nsbox::Caller::kRemote);
  REQUIRE_FALSE(remote);
  CHECK(remote.error().code == nsbox::ErrorCode::kPermissionDenied);
  auto smuggled = nsbox::create_options_from_json({{"local_sources", {{"base", "/"}}}}, {}, nsbox::Caller::kRemote);
  REQUIRE_FALSE(smuggled);
}

TEST_CASE("a manifest's environment joins the env, which wins, and its ephemeral paths are listed", "[manifest]") {
  auto o = nsbox::create_options_from_json(
      {{"env", {{"A", "flag"}}},
       {"manifest", {{"environment", {{"A", "manifest"}, {"B", {{"value", "b"}, {"description", "d"}}}}},
                     {"entries", {{"e", {{"type", "dir"}, {"ephemeral", true}}}, {"k", {{"type", "file"}}}}}}}},
      {}, nsbox::Caller::kRemote);
  REQUIRE(o);
  CHECK(o->launch.env == nsbox::EnvList{{"A", "flag"}, {"B", "b"}});
  CHECK(o->spec.ephemeral == std::vector<std::string>{"e"});
  for (const Json& bad : {Json{{"version", 2}}, Json{{"users", {"root"}}}, Json{{"environment", {{"A", 1}}}},
                          Json{{"entries", {{"a", {{"type", "file"}, {"ephemeral", "yes"}}}}}}}) {
    INFO(bad.dump());
    CHECK_FALSE(nsbox::create_options_from_json({{"manifest", bad}}, {}, nsbox::Caller::kRemote));
  }
}

TEST_CASE("a hostile manifest is bounded: entries, nesting, and a path that only looks like a URL", "[manifest]") {
  Json flat = Json::object();
  for (int i = 0; i <= 10000; ++i) flat["f" + std::to_string(i)] = {{"type", "file"}};
  auto many = parse(flat);
  REQUIRE_FALSE(many);
  CHECK(many.error().message.find("at most 10000 entries") != std::string::npos);
  Json deep = {{"type", "file"}};
  for (int i = 0; i < 40; ++i) deep = {{"type", "dir"}, {"children", {{"d", deep}}}};
  auto nested = parse({{"d", deep}});
  REQUIRE_FALSE(nested);
  CHECK(nested.error().message.find("nest deeper") != std::string::npos);
  // "/srv/m/a://b" is a path under the base, not a URL that skips the confinement.
  auto path = parse({{"r", {{"type", "git_repo"}, {"repo", "/srv/mx/a://b"}}}});
  REQUIRE_FALSE(path);
  CHECK(path.error().code == nsbox::ErrorCode::kPermissionDenied);
  CHECK(nsbox::protocol::nests_deeper_than(std::string(100, '[') + std::string(100, ']'), 64));
  CHECK_FALSE(nsbox::protocol::nests_deeper_than("{\"a\": \"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"}", 64));
}

TEST_CASE("a manifest's root is the sandbox's workspace root: its mounts follow it, a different workspace_root is refused", "[manifest]") {
  using nsbox::Caller;
  const Json entries = {{"data", {{"type", "s3"}, {"bucket", "b"}}}, {"rel", {{"type", "s3"}, {"bucket", "c"}, {"mount_path", "x"}}}};
  auto o = nsbox::create_options_from_json({{"manifest", {{"root", "/workspace/"}, {"entries", entries}}}}, {}, Caller::kRemote);
  REQUIRE(o);
  CHECK(o->spec.workspace_root == "/workspace");
  REQUIRE(o->spec.mounts.size() == 2);
  CHECK(o->spec.mounts[0].mount_path == "/workspace/data");
  CHECK(o->spec.mounts[1].mount_path == "/workspace/x");
  // The same root given twice is one; no root takes the document's.
  CHECK(nsbox::create_options_from_json({{"workspace_root", "/workspace"}, {"manifest", {{"root", "/workspace"}}}}, {}, Caller::kRemote));
  auto given = nsbox::create_options_from_json({{"workspace_root", "/app"}, {"manifest", {{"entries", entries}}}}, {}, Caller::kRemote);
  REQUIRE(given);
  CHECK(given->spec.mounts[0].mount_path == "/app/data");
  auto differ = nsbox::create_options_from_json({{"workspace_root", "/app"}, {"manifest", {{"root", "/workspace"}}}}, {}, Caller::kRemote);
  REQUIRE_FALSE(differ);
  CHECK(differ.error().message == "the manifest's root /workspace and \"workspace_root\" /app differ");
  for (const Json& bad : {Json("/etc"), Json(7), Json("relative")}) {
    INFO(bad.dump());
    CHECK_FALSE(nsbox::create_options_from_json({{"manifest", {{"root", bad}}}}, {}, Caller::kRemote));
    CHECK_FALSE(nsbox::create_options_from_json({{"workspace_root", bad}}, {}, Caller::kRemote));
  }
  // A bucket over the workspace, or over a directory above it, would hide it.
  for (const char* over : {"/workspace", "/code"}) {
    auto hidden = nsbox::create_options_from_json(
        {{"workspace_root", std::string(over) == "/code" ? "/code/project" : "/workspace"},
         {"mounts", {{{"type", "s3"}, {"bucket", "b"}, {"mount_path", over}}}}},
        {}, Caller::kRemote);
    REQUIRE_FALSE(hidden);
    CHECK(hidden.error().message.find("it would hide the workspace root") != std::string::npos);
  }
}
