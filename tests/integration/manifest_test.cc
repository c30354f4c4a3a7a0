// Manifests (docs/semantics.md, "Manifests"): entries made with their content and modes,
// host files copied without following a link, git repositories cloned on the host, the
// manifest's environment, ephemeral entries left out of snapshots, and every bad path
// refused before anything is made.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "isolation/sys/files.h"
#include "tests/support/nsbox_cli.h"
#include "tests/support/temp_dir.h"

using namespace nsbox::test;
using nlohmann::json;

namespace {

void write(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

std::string write_manifest(const TempDir& dir, const json& manifest, const std::string& name = "manifest.json") {
  std::string path = dir.path() + "/" + name;
  write(path, manifest.dump());
  return path;
}

ProcessResult git(const std::vector<std::string>& args, const std::string& dir) {
  std::vector<std::string> argv = {"/usr/bin/git", "-C", dir, "-c", "user.email=t@nsbox", "-c", "user.name=t"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = run_process(argv);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return r;
}

// A bare repository at `dir`/repo.git whose `main` holds README and pkg/m.py (first
// commit, returned) and then pkg/later.py (a second commit).
std::string make_bare_repo(const TempDir& dir) {
  REQUIRE(nsbox::files::exists("/usr/bin/git"));  // scripts/install-deps installs it
  std::string work = dir.path() + "/work";
  std::filesystem::create_directories(work);
  git({"init", "-q", "-b", "main"}, work);
  write(work + "/README", "top\n");
  write(work + "/pkg/m.py", "print('m')\n");
  git({"add", "."}, work);
  git({"commit", "-q", "-m", "one"}, work);
  std::string first = git({"rev-parse", "HEAD"}, work).out;
  first.pop_back();
  write(work + "/pkg/later.py", "print('later')\n");
  git({"add", "."}, work);
  git({"commit", "-q", "-m", "two"}, work);
  auto r = run_process({"/usr/bin/git", "clone", "-q", "--bare", work, dir.path() + "/repo.git"});
  REQUIRE(r.exit_code == 0);
  return first;
}

// Nothing of a refused create: no sandbox, no volume but the templates, no clone left.
void check_nothing_made(const TestRoot& root) {
  CHECK(TestRoot::json(root.nsbox({"ls", "--json"}))["sandboxes"].empty());
  for (const char* kind : {"/data/homes", "/data/volumes"})
    for (const auto& name : nsbox::files::list_dir(root.path() + kind).value_or(std::vector<std::string>{}))
      CHECK(is_store_image(name));
  for (const auto& name : nsbox::files::list_dir(root.path() + "/run/cache").value_or(std::vector<std::string>{}))
    CHECK_FALSE(name.starts_with("manifest-"));
}

}  // namespace

TEST_CASE("a manifest's entries are made with their content and modes, and its environment is the sandbox's", "[manifest]") {
  TestRoot root;
  TempDir dir("nsbox-manifest");
  write(dir.path() + "/src/a.txt", "alpha\n");
  write(dir.path() + "/src/sub/b.txt", "beta\n");
  REQUIRE(::chmod((dir.path() + "/src/sub/b.txt").c_str(), 0600) == 0);
  write(dir.path() + "/one.txt", "one\n");
  json manifest = {
      {"version", 1},
      {"root", "/home/user"},
      {"environment", {{"GREETING", "hi"}, {"DESCRIBED", {{"value", "v"}, {"description", "a value"}}}, {"OVERRIDDEN", "manifest"}}},
      {"entries",
       {{"notes/todo.md", {{"type", "file"}, {"content", "# todo\n"}, {"permissions", "0640"}, {"description", "a note"}}},
        {"bin", {{"type", "dir"}, {"children", {{"run.sh", {{"type", "file"}, {"content", "#!/bin/sh\necho ran\n"}}}}}}},
        {"data", {{"type", "local_dir"}, {"src", "src"}}},
        {"copy.txt", {{"type", "local_file"}, {"src", "one.txt"}, {"permissions", 0600}}}}}};
  auto id = root.create({"--manifest", write_manifest(dir, manifest), "--env", "OVERRIDDEN=flag"});
  auto r = root.sh(id, "cd ~ && stat -c '%a %U %n' notes/todo.md bin/run.sh copy.txt data/sub/b.txt && cat notes/todo.md copy.txt "
                       "data/a.txt data/sub/b.txt && bin/run.sh && echo \"$GREETING $DESCRIBED $OVERRIDDEN\"");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out ==
        "640 user notes/todo.md\n755 user bin/run.sh\n600 user copy.txt\n600 user data/sub/b.txt\n"
        "# todo\none\nalpha\nbeta\nran\nhi v flag\n");
}

TEST_CASE("every bad manifest path is refused, naming it, before anything is made", "[manifest]") {
  TestRoot root;
  TempDir dir("nsbox-manifest");
  write(dir.path() + "/src/a.txt", "alpha\n");
  TempDir outside("nsbox-outside");
  write(outside.path() + "/secret.txt", "secret\n");
  std::filesystem::create_symlink(dir.path() + "/src", dir.path() + "/linked-src");
  std::filesystem::create_directories(dir.path() + "/with-link");
  std::filesystem::create_symlink("/etc/passwd", dir.path() + "/with-link/passwd");
  std::filesystem::create_directories(dir.path() + "/with-fifo");
  REQUIRE(::mkfifo((dir.path() + "/with-fifo/pipe").c_str(), 0600) == 0);
  auto file = [](const std::string& content) { return json{{"type", "file"}, {"content", content}}; };
  struct Case {
    json entries;
    std::string error;
  };
  std::vector<Case> cases = {
      {{{"/etc/x", file("a")}}, "manifest path must be relative: /etc/x"},
      {{{"C:/x", file("a")}}, "manifest path must be relative: C:/x"},
      {{{"../x", file("a")}}, "manifest path must not escape root: ../x"},
      {{{"a/../../x", file("a")}}, "manifest path must not escape root: a/../../x"},
      {{{"ok", file("a")}, {"d", {{"type", "dir"}, {"children", {{"../../up", file("b")}}}}}}, "must not escape root: d/../../up"},
      {{{"d", {{"type", "dir"}, {"children", {{"/abs", file("b")}}}}}}, "manifest path must be relative: d//abs"},
      {{{"a", file("a")}, {"./a", file("b")}}, "manifest path given twice: a"},
      {{{"x", {{"type", "local_file"}, {"src", outside.path() + "/secret.txt"}}}}, "is outside the manifest's directory"},
      {{{"x", {{"type", "local_file"}, {"src", "src/../../secret.txt"}}}}, "must not use `..`"},
      {{{"x", {{"type", "local_dir"}, {"src", "linked-src"}}}}, "is or passes through a symlink"},
      {{{"x", {{"type", "local_file"}, {"src", "linked-src/a.txt"}}}}, "is or passes through a symlink"},
      {{{"x", {{"type", "local_dir"}, {"src", "with-link"}}}}, "with-link/passwd is a symlink (symlink_not_supported)"},
      {{{"x", {{"type", "local_dir"}, {"src", "with-fifo"}}}}, "with-fifo/pipe is not a regular file or directory"},
      {{{"x", {{"type", "local_file"}, {"src", "src"}}}}, "is not a regular file"},
      {{{"x", {{"type", "local_dir"}, {"src", "missing"}}}}, "missing"},
      {{{"x", {{"type", "unknown"}}}}, "has type 'unknown'"},
      {{{"x", {{"type", "local_dir"}, {"src", "src"}}}, {"x/inner", file("a")}}, "x/inner is inside x"},
      {{{"data", {{"type", "s3"}, {"bucket", "b"}}}, {"data/inner", file("a")}}, "data/inner and the mount at /home/user/data overlap"},
  };
  for (const auto& c : cases) {
    INFO(c.entries.dump());
    auto r = root.nsbox({"create", "--manifest", write_manifest(dir, {{"version", 1}, {"entries", c.entries}})});
    CHECK(r.exit_code != 0);
    CHECK(r.err.find(c.error) != std::string::npos);
    INFO(r.err);
    CHECK(r.err.find("secret\n") == std::string::npos);
  }
  // A granted directory may be read.
  auto granted = root.nsbox({"create", "--json", "--manifest",
                             write_manifest(dir, {{"version", 1}, {"entries", {{"s.txt", {{"type", "local_file"}, {"src", outside.path() + "/secret.txt"}}}}}}),
                             "--local-grant", outside.path()});
  INFO(granted.err);
  REQUIRE(granted.exit_code == 0);
  std::string id = TestRoot::json(granted)["id"];
  CHECK(root.sh(id, "cat ~/s.txt").out == "secret\n");
  REQUIRE(root.nsbox({"rm", id}).exit_code == 0);
  check_nothing_made(root);
}

TEST_CASE("a git_repo entry is cloned on the host from a local bare repository, at a branch or a commit, without .git", "[manifest]") {
  TestRoot root;
  TempDir dir("nsbox-manifest");
  std::string first = make_bare_repo(dir);
  json manifest = {{"version", 1},
                   {"entries",
                    {{"code", {{"type", "git_repo"}, {"repo", "./repo.git"}, {"ref", "main"}}},
                     {"old", {{"type", "git_repo"}, {"repo", "./repo.git"}, {"ref", first}, {"subpath", "pkg"}}}}}};
  auto id = root.create({"--manifest", write_manifest(dir, manifest)});
  auto r = root.sh(id, "cd ~ && find code old | sort && stat -c %U code/pkg/m.py");
  INFO(r.err);
  CHECK(r.out == "code\ncode/README\ncode/pkg\ncode/pkg/later.py\ncode/pkg/m.py\nold\nold/m.py\nuser\n");

  // A missing subpath or ref is refused before anything is made, and the clone is gone.
  TestRoot empty;
  for (auto [entry, error] : {std::pair{json{{"type", "git_repo"}, {"repo", "./repo.git"}, {"subpath", "nope"}}, "subpath nope is not in"},
                              {json{{"type", "git_repo"}, {"repo", "./repo.git"}, {"ref", "no-such-branch"}}, "git clone of"},
                              {json{{"type", "git_repo"}, {"repo", "./repo.git"}, {"ref", "abcdef1234"}}, "git rev-parse of"},
                              {json{{"type", "git_repo"}, {"repo", "./repo.git"}, {"ref", "--upload-pack=x"}}, "is not a branch"}}) {
    auto bad = empty.nsbox({"create", "--manifest", write_manifest(dir, {{"version", 1}, {"entries", {{"c", entry}}}})});
    CHECK(bad.exit_code != 0);
    INFO(bad.err);
    CHECK(bad.err.find(error) != std::string::npos);
  }
  check_nothing_made(empty);
}

TEST_CASE("an ephemeral manifest entry is never in a snapshot, and the older list of mounts still reads", "[manifest]") {
  TestRoot root;
  TempDir dir("nsbox-manifest");
  json manifest = {{"version", 1},
                   {"entries",
                    {{"kept.txt", {{"type", "file"}, {"content", "kept"}}},
                     {"scratch", {{"type", "dir"}, {"ephemeral", true}, {"children", {{"tmp.txt", {{"type", "file"}, {"content", "t"}}}}}}},
                     {"cache.bin", {{"type", "file"}, {"content", "c"}, {"ephemeral", true}}}}}};
  auto id = root.create({"--manifest", write_manifest(dir, manifest)});
  REQUIRE(root.sh(id, "echo more > ~/scratch/later.txt").exit_code == 0);
  auto made = root.nsbox({"snapshot", "create", "--json", id});
  REQUIRE(made.exit_code == 0);
  std::string snap_dir = root.path() + "/data/snapshots/" + TestRoot::json(made)["id"].get<std::string>();
  auto listing = run_process({"/bin/tar", "-tf", snap_dir + "/home.tar"});
  REQUIRE(listing.exit_code == 0);
  CHECK(listing.out.find("kept.txt\n") != std::string::npos);
  CHECK(listing.out.find("scratch") == std::string::npos);
  CHECK(listing.out.find("cache.bin") == std::string::npos);
  // The record keeps them across stop and start.
  REQUIRE(root.nsbox({"stop", id}).exit_code == 0);
  REQUIRE(root.nsbox({"start", id}).exit_code == 0);
  auto again = root.nsbox({"snapshot", "create", "--json", id});
  REQUIRE(again.exit_code == 0);
  std::string again_dir = root.path() + "/data/snapshots/" + TestRoot::json(again)["id"].get<std::string>();
  CHECK(run_process({"/bin/tar", "-tf", again_dir + "/home.tar"}).out.find("scratch") == std::string::npos);

  // {"mounts": [...]} is the older form: a list of mounts, no entries.
  auto old_form = root.nsbox({"create", "--manifest", write_manifest(dir, {{"mounts", json::array()}}, "mounts.json")});
  INFO(old_form.err);
  CHECK(old_form.exit_code == 0);
}
