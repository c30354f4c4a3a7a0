// `nsbox resume STATE` (docs/semantics.md, "Resume"): reattach to a running sandbox,
// start a stopped one (its snapshot restored only when the workspace no longer matches
// it), recreate a gone one from its snapshot; errors before anything starts.
#include <catch2/catch.hpp>
#include <string>
#include <tuple>

#include "isolation/sys/files.h"
#include "tests/support/nsbox_cli.h"

using namespace nsbox::test;
using nlohmann::json;

namespace {

std::string save_state(const TestRoot& root, const std::string& id, const std::string& name = "state") {
  auto r = root.nsbox({"inspect", id, "--state"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::string path = root.path() + "/" + name + ".json";
  REQUIRE(nsbox::files::atomic_write(path, r.out));
  return path;
}

json resume(const TestRoot& root, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"resume", "--json"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = root.nsbox(argv);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return TestRoot::json(r);
}

std::string inode(const TestRoot& root, const std::string& id, const std::string& path) {
  auto r = root.sh(id, "stat -c %i " + path);
  REQUIRE(r.exit_code == 0);
  return r.out;
}

}  // namespace

TEST_CASE("resume reattaches a running sandbox, starts a stopped one without restoring a workspace that matches its snapshot, "
          "and restores one that changed", "[resume][zygote]") {
  TestRoot root;
  auto id = root.create({"--name", "kept", "--env", "TOKEN=t1"});
  REQUIRE(root.sh(id, "echo v1 > ~/work.txt").exit_code == 0);
  REQUIRE(root.cell(id, "x = 1")["status"] == "ok");  // the kernel's user site exists: the home holds still
  REQUIRE(root.nsbox({"snapshot", "create", id}).exit_code == 0);
  std::string state = save_state(root, id);
  std::string before = inode(root, id, "~/work.txt");

  auto attached = resume(root, {state});
  CHECK(attached["action"] == "reattached");
  CHECK(attached["id"] == id);
  CHECK(root.cell(id, "x")["status"] == "ok");  // the same kernel: its variable is there

  REQUIRE(root.nsbox({"stop", id}).exit_code == 0);
  auto bare = root.nsbox({"resume", state});
  CHECK(bare.exit_code != 0);
  CHECK(bare.err.find("TOKEN") != std::string::npos);
  auto started = resume(root, {state, "--env", "TOKEN=t2"});
  CHECK(started["action"] == "started");  // the fingerprint matched: nothing restored
  CHECK(inode(root, id, "~/work.txt") == before);
  CHECK(root.sh(id, "cat ~/work.txt; echo $TOKEN").out == "v1\nt2\n");

  REQUIRE(root.sh(id, "echo v2 > ~/work.txt && echo new > ~/extra.txt").exit_code == 0);
  REQUIRE(root.nsbox({"stop", id}).exit_code == 0);
  auto restored = resume(root, {state, "--env", "TOKEN=t3"});
  CHECK(restored["action"] == "restored");
  CHECK(root.sh(id, "cat ~/work.txt; ls ~/extra.txt 2>&1 >/dev/null | wc -l").out == "v1\n1\n");
}

TEST_CASE("resume recreates a gone sandbox from its snapshot (a new id, the same name, size and network), and refuses "
          "without one", "[resume]") {
  TestRoot root;
  auto id = root.create({"--name", "gone", "--size", "medium"});
  REQUIRE(root.sh(id, "mkdir -p ~/proj && echo kept > ~/proj/a.txt").exit_code == 0);
  std::string no_snapshot = save_state(root, id, "before-snapshot");
  REQUIRE(root.nsbox({"snapshot", "create", id}).exit_code == 0);
  std::string state = save_state(root, id);
  REQUIRE(root.nsbox({"rm", id}).exit_code == 0);

  auto refused = root.nsbox({"resume", no_snapshot});
  CHECK(refused.exit_code != 0);
  CHECK(refused.err.find("names no snapshot") != std::string::npos);
  CHECK(TestRoot::json(root.nsbox({"ls", "--json"}))["sandboxes"].empty());

  auto recreated = resume(root, {state});
  CHECK(recreated["action"] == "recreated");
  std::string again = recreated["id"];
  CHECK(again != id);
  CHECK(recreated["name"] == "gone");
  CHECK(recreated["size"] == "medium");
  CHECK(root.sh("gone", "cat ~/proj/a.txt").out == "kept\n");

  // Not a state: refused, naming what it wants.
  REQUIRE(nsbox::files::atomic_write(root.path() + "/bad.json", R"({"id": "sbx-x"})"));
  auto bad = root.nsbox({"resume", root.path() + "/bad.json"});
  CHECK(bad.exit_code != 0);
  CHECK(bad.err.find("not an nsbox sandbox state") != std::string::npos);
}

TEST_CASE("resume with the manifest the sandbox was made with keeps its workspace, and with another manifest it restores", "[resume][zygote]") {
  TestRoot root;
  auto manifest = [&](const std::string& name, const std::string& content) {
    std::string path = root.path() + "/" + name;
    REQUIRE(nsbox::files::atomic_write(path, json{{"version", 1}, {"entries", {{"a.txt", {{"type", "file"}, {"content", content}}}}}}.dump()));
    return path;
  };
  std::string first = manifest("first.json", "one");
  auto created = root.nsbox({"create", "--manifest", first});
  REQUIRE(created.exit_code == 0);
  std::string id = created.out.substr(0, created.out.find('\n'));
  REQUIRE(root.cell(id, "1")["status"] == "ok");  // the kernel's user site exists: the home holds still
  REQUIRE(root.nsbox({"snapshot", "create", id}).exit_code == 0);
  std::string state = save_state(root, id);
  CHECK(TestRoot::json(root.nsbox({"inspect", id, "--state"}))["manifest_digest"].get<std::string>().size() == 64);

  REQUIRE(root.nsbox({"stop", id}).exit_code == 0);
  CHECK(resume(root, {state, "--manifest", first})["action"] == "started");
  REQUIRE(root.nsbox({"stop", id}).exit_code == 0);
  CHECK(resume(root, {state, "--manifest", manifest("second.json", "two")})["action"] == "restored");
  CHECK(root.sh(id, "cat ~/a.txt").out == "one");  // the snapshot's
}

TEST_CASE("a crafted state gets nothing of another sandbox or of the host", "[resume]") {
  TestRoot root;
  auto victim = root.create({"--name", "victim"});
  REQUIRE(root.sh(victim, "echo private > ~/secret.txt").exit_code == 0);
  auto made = root.nsbox({"snapshot", "create", "--json", victim});
  REQUIRE(made.exit_code == 0);
  std::string victim_snap = TestRoot::json(made)["id"];
  auto attacker = root.create({"--name", "attacker"});
  auto state = TestRoot::json(root.nsbox({"inspect", attacker, "--state"}));
  auto write_state = [&](const json& s) {
    std::string path = root.path() + "/crafted.json";
    REQUIRE(nsbox::files::atomic_write(path, s.dump()));
    return path;
  };
  REQUIRE(root.nsbox({"stop", attacker}).exit_code == 0);
  // Another sandbox's snapshot: refused, whether the sandbox is stopped or gone.
  json stolen = state;
  stolen["snapshot"] = {{"id", victim_snap}, {"fingerprint", "x"}, {"include_files", false}};
  auto r = root.nsbox({"resume", write_state(stolen)});
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("is of sandbox " + victim) != std::string::npos);
  REQUIRE(root.nsbox({"rm", attacker}).exit_code == 0);
  r = root.nsbox({"resume", write_state(stolen)});
  CHECK(r.exit_code != 0);
  // A tool bridge, package sources or the host's network are not brought back by a state.
  auto own = root.create({"--name", "own"});
  REQUIRE(root.nsbox({"snapshot", "create", own}).exit_code == 0);
  json base = TestRoot::json(root.nsbox({"inspect", own, "--state"}));
  REQUIRE(root.nsbox({"rm", own}).exit_code == 0);
  for (auto [field, value, says] : {std::tuple{"tools", json{{"backend", "dir"}, {"tools_dir", "/tmp"}}, "a tool bridge"},
                                    {"packages", json{{"wheelhouse", "/"}}, "package sources"},
                                    {"net", json("host"), "the host's network"}}) {
    json s = base;
    s[field] = value;
    auto refused = root.nsbox({"resume", write_state(s)});
    CHECK(refused.exit_code != 0);
    INFO(refused.err);
    CHECK(refused.err.find(says) != std::string::npos);
  }
  // Fields of the wrong type are an error, never a crash.
  for (const json& bad : {json{{"type", "nsbox"}, {"version", 1}, {"id", "sbx-x"}, {"mounts", {1, 2}}},
                          json{{"type", "nsbox"}, {"version", "1"}, {"id", 7}},
                          json{{"type", "nsbox"}, {"version", 1}, {"id", "sbx-x"}, {"size", 3}, {"snapshot", {{"id", 5}}}}}) {
    auto refused = root.nsbox({"resume", write_state(bad)});
    CHECK(refused.exit_code != 0);
    CHECK(refused.err.find("error") != std::string::npos);
  }
  // Only the victim is left, untouched.
  auto left = TestRoot::json(root.nsbox({"ls", "--json"}))["sandboxes"];
  REQUIRE(left.size() == 1);
  CHECK(root.sh(victim, "cat ~/secret.txt").out == "private\n");
}
