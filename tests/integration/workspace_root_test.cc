// The workspace root (docs/semantics.md, "The workspace root"): `create --workspace-root`
// and a manifest's "root" put the workspace where an agent framework expects it (the
// OpenAI Agents SDK's /workspace), as a directory of the home volume.
#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "tests/support/nsbox_cli.h"
#include "tests/support/temp_dir.h"

using nsbox::test::TestRoot;

TEST_CASE("a bad workspace root is refused, naming the rule, and nothing is made") {
  TestRoot root;
  const std::pair<const char*, const char*> bad[] = {
      {"workspace", "is not an absolute path"},
      {"/", "is the sandbox's root"},
      {"/etc/app", "is in /etc, which belongs to the sandbox's system"},
      {"/tmp/w", "is in /tmp, which belongs to the sandbox's system"},
      {"/home/user2", "is in /home, which belongs to the sandbox's system"},
      {"/app/../etc", "is not a plain path"},
      {"/app//space", "is not a plain path"},
      {"/app space", "is not a plain path"},
  };
  for (const auto& [path, why] : bad) {
    INFO(path);
    auto r = root.nsbox({"create", "--workspace-root", path});
    CHECK(r.exit_code != 0);
    CHECK(r.err.find(why) != std::string::npos);
  }
  CHECK(TestRoot::json(root.nsbox({"ls", "--json"}))["sandboxes"].empty());
}

TEST_CASE("commands, processes and cells start in the workspace root, a directory of the home volume kept across stop and start") {
  TestRoot root;
  auto id = root.create({"--workspace-root", "/workspace", "--lazy-kernel"});
  CHECK(TestRoot::json(root.nsbox({"inspect", "--json", id}))["workspace_root"] == "/workspace");
  CHECK(root.sh(id, "pwd").out == "/workspace\n");
  CHECK(root.sh(id, "echo kept > note; cat /home/user/workspace/note; echo $HOME").out == "kept\n/home/user\n");
  root.start_command({"spawn", id}, {}, {"bash", "-c", "pwd > started-here"});
  CHECK(root.wait_for_file(id, "/workspace/started-here", 30));
  CHECK(root.sh(id, "cat /workspace/started-here").out == "/workspace\n");
  root.start_command({"spawn", id}, {"--cwd", "/tmp"}, {"bash", "-c", "pwd > /workspace/elsewhere"});
  CHECK(root.wait_for_file(id, "/workspace/elsewhere", 30));
  CHECK(root.sh(id, "cat /workspace/elsewhere").out == "/tmp\n");
  // The kernel (started at this first cell) too: a relative open finds the workspace's file.
  auto cell = root.cell(id, "import os; print(os.getcwd(), open('note').read().strip())");
  CHECK(cell["stdout"] == "/workspace kept\n");
  // The root is a mount point: its content can go, the directory cannot.
  auto removed = root.sh(id, "rm -rf /workspace; ls -d /workspace && touch /workspace/again && echo ok");
  CHECK(removed.out.find("ok") != std::string::npos);

  REQUIRE(root.nsbox({"stop", id}).exit_code == 0);
  REQUIRE(root.nsbox({"start", id}).exit_code == 0);
  CHECK(root.sh(id, "ls /workspace").out == "again\n");
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}

TEST_CASE("a workspace the sandbox replaced by a link is moved aside at the next start and never followed") {
  TestRoot root;
  auto id = root.create({"--workspace-root", "/workspace", "--lazy-kernel"});
  REQUIRE(root.sh(id, "echo mine > /workspace/note && cd / && mv /home/user/workspace /home/user/old && "
                      "ln -s /etc /home/user/workspace && echo swapped")
              .out == "swapped\n");
  REQUIRE(root.nsbox({"stop", id}).exit_code == 0);
  REQUIRE(root.nsbox({"start", id}).exit_code == 0);
  // A fresh, empty workspace; the link kept beside it; the old content where it was moved.
  CHECK(root.sh(id, "ls -A /workspace | wc -l").out == "0\n");
  CHECK(root.sh(id, "readlink /home/user/workspace.moved-*").out == "/etc\n");
  CHECK(root.sh(id, "cat /home/user/old/note").out == "mine\n");
  CHECK(root.sh(id, "pwd").out == "/workspace\n");
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}

TEST_CASE("a manifest's root is the workspace root: entries, relative mounts and snapshots follow it") {
  TestRoot root;
  nsbox::test::TempDir dir;
  const std::string manifest = dir.path() + "/manifest.json";
  std::ofstream(manifest) << R"({"version": 1, "root": "/app/src",
    "entries": {"README.md": {"type": "file", "content": "hello\n"}, "data": {"type": "dir"}}})";
  auto id = root.create({"--manifest", manifest, "--lazy-kernel"});
  CHECK(TestRoot::json(root.nsbox({"inspect", "--json", id}))["workspace_root"] == "/app/src");
  CHECK(root.sh(id, "pwd; cat README.md; test -d data && echo dir").out == "/app/src\nhello\ndir\n");
  CHECK(root.sh(id, "cat /home/user/workspace/README.md").out == "hello\n");

  // A manifest and a workspace_root that differ: refused, nothing made.
  auto differ = root.nsbox({"create", "--manifest", manifest, "--workspace-root", "/workspace"});
  CHECK(differ.exit_code != 0);
  CHECK(differ.err.find("the manifest's root /app/src and \"workspace_root\" /workspace differ") != std::string::npos);

  // A snapshot holds the home, the workspace in it.
  REQUIRE(root.sh(id, "echo later > notes.txt").exit_code == 0);
  REQUIRE(root.nsbox({"snapshot", "create", id, "--name", "ws"}).exit_code == 0);
  auto copy = root.create({"--from-snapshot", "ws", "--workspace-root", "/app/src", "--lazy-kernel"});
  CHECK(root.sh(copy, "cat notes.txt README.md").out == "later\nhello\n");
  CHECK(root.nsbox({"rm", id, copy}).exit_code == 0);
  CHECK(root.nsbox({"snapshot", "rm", "ws"}).exit_code == 0);
}

TEST_CASE("a workspace root under /home/user is that directory, made at the start") {
  TestRoot root;
  auto id = root.create({"--workspace-root", "/home/user/project", "--lazy-kernel"});
  CHECK(root.sh(id, "pwd; stat -c %U .").out == "/home/user/project\nuser\n");
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}
