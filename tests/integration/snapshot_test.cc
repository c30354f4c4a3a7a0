// Snapshots of a sandbox's workspace (docs/semantics.md, "Snapshots"): what goes in (and
// what never does), written atomically, restored before the first command, and crafted
// archives refused before anything is written.
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "isolation/sys/files.h"
#include "tests/support/host_features.h"
#include "tests/support/nsbox_cli.h"

using namespace nsbox::test;
using nlohmann::json;

namespace {

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// `tar -tvf`'s listing of a snapshot's archive (GNU tar, an independent reader).
std::string tar_listing(const std::string& archive) {
  auto r = run_process({"/bin/tar", "-tvf", archive});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return r.out;
}

std::string tar_names(const std::string& archive) {
  auto r = run_process({"/bin/tar", "-tf", archive});
  REQUIRE(r.exit_code == 0);
  return r.out;
}

// A snapshot directory holding `home.tar` made by Python's tarfile from `members`
// (Python source of a list of TarInfo/bytes pairs), as if nsbox had made it: for archives
// nsbox would never write.
void plant_snapshot(const std::string& dir, const std::string& id, const std::string& members) {
  std::string snap = dir + "/" + id;
  std::filesystem::create_directories(snap);
  std::string script =
      "import io, sys, tarfile\n"
      "def f(n, data=b'x'):\n"
      "    i = tarfile.TarInfo(n); i.size = len(data); return (i, data)\n"
      "def l(n, target, kind=tarfile.SYMTYPE):\n"
      "    i = tarfile.TarInfo(n); i.type = kind; i.linkname = target; return (i, None)\n"
      "def dev(n):\n"
      "    i = tarfile.TarInfo(n); i.type = tarfile.CHRTYPE; i.devmajor = 1; i.devminor = 3; return (i, None)\n"
      "members = " + members + "\n"
      "with tarfile.open(sys.argv[1], 'w', format=tarfile.PAX_FORMAT) as t:\n"
      "    for info, data in members:\n"
      "        t.addfile(info, io.BytesIO(data) if data is not None else None)\n";
  auto r = run_process({"/usr/bin/python3.11", "-c", script, snap + "/home.tar"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  json meta = {{"id", id}, {"name", ""}, {"sandbox", "sbx-planted"}, {"include_files", false}, {"spec", json::object()}};
  REQUIRE(nsbox::files::atomic_write(snap + "/snapshot.json", meta.dump()));
}

// What a failed create left: sandboxes, and home or files volumes of sandboxes.
void check_nothing_made(const TestRoot& root) {
  CHECK(TestRoot::json(root.nsbox({"ls", "--json"}))["sandboxes"].empty());
  for (const char* kind : {"/data/homes", "/data/volumes"})
    for (const auto& name : nsbox::files::list_dir(root.path() + kind).value_or(std::vector<std::string>{}))
      CHECK(is_store_image(name));  // formatted templates only
}

}  // namespace

TEST_CASE("a snapshot holds the workspace, relative, links as links, no FIFO and no nsbox output, and a new sandbox starts from it", "[snapshot][zygote]") {
  TestRoot root;
  auto id = root.create({"--name", "origin"});
  REQUIRE(root.sh(id, "mkdir -p ~/proj/empty && printf 'print(1)\\n' > ~/proj/a.py && chmod 750 ~/proj/a.py && "
                      "ln -s proj/a.py ~/link && ln -s /etc/passwd ~/abs-link && mkfifo ~/fifo && "
                      "echo data > /mnt/files/d.txt && mkdir -p /mnt/files/.nsbox/output && echo spill > /mnt/files/.nsbox/output/x")
              .exit_code == 0);
  // The kernel makes its user site (~/.local) as it starts: once it answered, the
  // workspace holds still.
  REQUIRE(root.cell(id, "1")["status"] == "ok");
  auto made = root.nsbox({"snapshot", "create", "--json", id, "--name", "first", "--include-files"});
  INFO(made.err);
  REQUIRE(made.exit_code == 0);
  auto snap = TestRoot::json(made);
  std::string snap_id = snap["id"];
  CHECK(snap_id.starts_with("snp-"));
  CHECK(snap["name"] == "first");
  // Left out and named: the FIFO, and the link pointing out of /home/user (a restore
  // would refuse it).
  CHECK(snap["skipped"] == 2);
  CHECK(snap["left_out"] == json::array({"home/abs-link -> /etc/passwd", "home/fifo"}));
  CHECK(snap["spec"]["size"] == "standard");
  std::string dir = root.path() + "/data/snapshots/" + snap_id;

  std::string home = tar_listing(dir + "/home.tar");
  CHECK(home.find("proj/a.py") != std::string::npos);
  CHECK(home.find("-rwxr-x---") != std::string::npos);
  CHECK(home.find("link -> proj/a.py") != std::string::npos);
  CHECK(home.find("abs-link") == std::string::npos);
  CHECK(home.find("root:") == std::string::npos);  // never followed
  CHECK(home.find("fifo") == std::string::npos);
  for (const auto& line : {tar_names(dir + "/home.tar"), tar_names(dir + "/files.tar")}) {
    CHECK(line.find("/home/user") == std::string::npos);  // relative members
    CHECK(line.find("\n/") == std::string::npos);
    CHECK(line.front() != '/');
  }
  std::string files = tar_names(dir + "/files.tar");
  CHECK(files.find("d.txt") != std::string::npos);
  CHECK(files.find(".nsbox") == std::string::npos);

  auto ls = TestRoot::json(root.nsbox({"snapshot", "ls", "--json"}));
  REQUIRE(ls["snapshots"].size() == 1);
  CHECK(ls["snapshots"][0]["id"] == snap_id);
  CHECK(root.nsbox({"snapshot", "create", id, "--name", "first"}).err.find("already exists") != std::string::npos);

  auto copy = root.create({"--from-snapshot", "first"});
  CHECK(root.sh(copy, "cat ~/proj/a.py /mnt/files/d.txt; stat -c '%A %U' ~/proj/a.py; readlink ~/link; test -d ~/proj/empty && echo empty")
            .out == "print(1)\ndata\n-rwxr-x--- user\nproj/a.py\nempty\n");

  // The same workspace gives the same fingerprint; a change gives another.
  auto again = TestRoot::json(root.nsbox({"snapshot", "create", "--json", id, "--include-files"}));
  CHECK(again["fingerprint"] == snap["fingerprint"]);
  REQUIRE(root.sh(id, "echo more >> ~/proj/a.py").exit_code == 0);
  auto changed = TestRoot::json(root.nsbox({"snapshot", "create", "--json", id, "--include-files"}));
  CHECK(changed["fingerprint"] != snap["fingerprint"]);

  CHECK(root.nsbox({"snapshot", "rm", "first", again["id"], changed["id"]}).exit_code == 0);
  CHECK(TestRoot::json(root.nsbox({"snapshot", "ls", "--json"}))["snapshots"].empty());
  CHECK(root.nsbox({"snapshot", "rm", "first"}).err.find("no snapshot 'first'") != std::string::npos);
}

TEST_CASE("start --from-snapshot replaces the workspace of a stopped sandbox", "[snapshot]") {
  TestRoot root;
  auto id = root.create();
  REQUIRE(root.sh(id, "echo v1 > ~/state").exit_code == 0);
  auto snap = first_line(root.nsbox({"snapshot", "create", id}).out);
  REQUIRE(snap.starts_with("snp-"));
  REQUIRE(root.sh(id, "echo v2 > ~/state && echo later > ~/later").exit_code == 0);
  REQUIRE(root.nsbox({"stop", id}).exit_code == 0);
  auto started = root.nsbox({"start", id, "--from-snapshot", snap});
  INFO(started.err);
  REQUIRE(started.exit_code == 0);
  CHECK(root.sh(id, "cat ~/state; ls ~").out == "v1\nstate\n");
}

TEST_CASE("a snapshot on a full disk fails whole: no partial snapshot is left", "[snapshot]") {
  TestRoot root;
  SmallDisk disk(root, "8m");
  auto id = root.create();
  REQUIRE(root.sh(id, "head -c 12M /dev/urandom > ~/big").exit_code == 0);
  std::string dir = disk.path() + "/snapshots";
  auto r = root.nsbox({"snapshot", "create", id, "--snapshot-dir", dir});
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("No space left on device") != std::string::npos);
  CHECK(nsbox::files::list_dir(dir).value_or(std::vector<std::string>{"?"}).empty());
  CHECK(TestRoot::json(root.nsbox({"snapshot", "ls", "--json", "--snapshot-dir", dir}))["snapshots"].empty());
  // With room, the same works.
  REQUIRE(root.sh(id, "rm ~/big && echo small > ~/s").exit_code == 0);
  CHECK(root.nsbox({"snapshot", "create", id, "--snapshot-dir", dir}).exit_code == 0);
}

TEST_CASE("crafted archives are refused before anything is written, and nothing of the sandbox is left", "[snapshot]") {
  TestRoot root;
  std::string dir = root.path() + "/data/snapshots";
  struct Case {
    const char* id;
    const char* members;
    const char* says;
  };
  const Case cases[] = {
      {"snp-0000000000000001", "[f('ok'), f('../evil')]", "'../evil' refused: '..' in the path"},
      {"snp-0000000000000002", "[f('/etc/evil')]", "'/etc/evil' refused: an absolute path"},
      {"snp-0000000000000003", "[l('out', '../../etc')]", "'out' refused: a symlink pointing out"},
      {"snp-0000000000000004", "[l('abs', '/etc/passwd')]", "'abs' refused: a symlink pointing out"},
      {"snp-0000000000000005", "[l('b', 'a', tarfile.LNKTYPE), f('a')]", "'b' refused: a hard link to what is not a file before it"},
      {"snp-0000000000000006", "[dev('null')]", "'null' refused: a device node"},
      {"snp-0000000000000007", "[f('a', b'1'), f('a', b'2')]", "'a' refused: a duplicate"},
      {"snp-0000000000000008", "[l('d', 'sub'), f('sub/x'), f('d/../../escape')]", "refused: '..' in the path"},
  };
  for (const auto& c : cases) {
    INFO(c.members);
    plant_snapshot(dir, c.id, c.members);
    auto r = root.nsbox({"create", "--from-snapshot", c.id});
    CHECK(r.exit_code != 0);
    CHECK(r.err.find(c.says) != std::string::npos);
    check_nothing_made(root);
  }
  CHECK_FALSE(std::filesystem::exists(root.path() + "/evil"));
  CHECK_FALSE(std::filesystem::exists(root.path() + "/data/evil"));

  // Too many members, or bytes, for the limits (NSBOX_SNAPSHOT_MAX_*).
  plant_snapshot(dir, "snp-0000000000000009", "[f('m%d' % i) for i in range(20)]");
  auto many = root.nsbox({"create", "--from-snapshot", "snp-0000000000000009"}, {.extra_env = {"NSBOX_SNAPSHOT_MAX_MEMBERS=10"}});
  CHECK(many.err.find("more than 10 members") != std::string::npos);
  auto big = root.nsbox({"create", "--from-snapshot", "snp-0000000000000009"}, {.extra_env = {"NSBOX_SNAPSHOT_MAX_BYTES=5"}});
  CHECK(big.err.find("more than 5 bytes") != std::string::npos);
  check_nothing_made(root);
  auto fine = root.nsbox({"create", "--from-snapshot", "snp-0000000000000009"});
  INFO(fine.err);
  REQUIRE(fine.exit_code == 0);
  CHECK(root.sh(first_line(fine.out), "ls ~ | wc -l").out == "20\n");

  // The same limits hold when a snapshot is made.
  auto id = first_line(fine.out);
  auto refused = root.nsbox({"snapshot", "create", id}, {.extra_env = {"NSBOX_SNAPSHOT_MAX_MEMBERS=10"}});
  CHECK(refused.exit_code != 0);
  CHECK(refused.err.find("more than 10 members") != std::string::npos);
}

TEST_CASE("a refused restore leaves a stopped sandbox's workspace as it was, and one too big for the volume is refused first", "[snapshot]") {
  TestRoot root;
  auto id = root.create({"--home-size", "64M"});
  REQUIRE(root.sh(id, "echo mine > ~/kept && mkfifo ~/$'\\xff-pipe'").exit_code == 0);
  // A name that is not UTF-8 is left out and named (its bytes replaced), never fatal.
  auto odd = root.nsbox({"snapshot", "create", "--json", id});
  INFO(odd.err);
  REQUIRE(odd.exit_code == 0);
  CHECK(TestRoot::json(odd)["left_out"].size() == 1);
  REQUIRE(root.nsbox({"stop", id}).exit_code == 0);
  plant_snapshot(root.path() + "/data/snapshots", "snp-00000000000000aa", "[f('fine'), f('../evil')]");
  auto refused = root.nsbox({"start", id, "--from-snapshot", "snp-00000000000000aa"});
  CHECK(refused.exit_code != 0);
  CHECK(refused.err.find("'../evil' refused") != std::string::npos);
  CHECK(TestRoot::json(root.nsbox({"inspect", "--json", id}))["status"] == "stopped");
  REQUIRE(root.nsbox({"start", id}).exit_code == 0);
  CHECK(root.sh(id, "cat ~/kept; ls ~/fine 2>&1 | grep -c 'No such'").out == "mine\n1\n");

  if (TestRoot::json(root.nsbox({"inspect", "--json", id}))["home"]["kind"] == "image") {
    REQUIRE(root.sh(id, "head -c 40M /dev/zero > ~/big").exit_code == 0);
    auto big = first_line(root.nsbox({"snapshot", "create", id}).out);
    auto small = root.nsbox({"create", "--home-size", "32M", "--from-snapshot", big});
    CHECK(small.exit_code != 0);
    CHECK(small.err.find("more than the 32 MiB volume") != std::string::npos);
    CHECK(small.err.find("--home-size") != std::string::npos);
  }
}

TEST_CASE("inspect --state says what resuming needs, with the newest snapshot and its fingerprint, and no secret", "[snapshot]") {
  TestRoot root;
  auto id = root.create({"--name", "stateful", "--env", "API_TOKEN=tok-5b1f9e-secret", "--size", "medium"});
  auto bare = root.nsbox({"inspect", id, "--state"});
  INFO(bare.err);
  REQUIRE(bare.exit_code == 0);
  auto state = TestRoot::json(bare);
  CHECK(state["version"] == 1);
  CHECK(state["id"] == id);
  CHECK(state["size"] == "medium");
  CHECK(state["env_names"] == json::array({"API_TOKEN"}));
  CHECK(state["snapshot"].is_null());
  auto first = TestRoot::json(root.nsbox({"snapshot", "create", "--json", id}));
  auto second = TestRoot::json(root.nsbox({"snapshot", "create", "--json", id}));
  auto later = root.nsbox({"inspect", "stateful", "--state"});
  CHECK(later.out.find("tok-5b1f9e-secret") == std::string::npos);
  auto with_snapshot = TestRoot::json(later);
  CHECK(with_snapshot["snapshot"]["id"] == second["id"]);
  CHECK(with_snapshot["snapshot"]["fingerprint"] == second["fingerprint"]);
  CHECK(first["id"] != second["id"]);
}

TEST_CASE("a restore that fails while writing leaves a stopped sandbox's workspace as it was, and nothing beside it", "[snapshot]") {
  TestRoot root;
  auto id = root.create({"--home-size", "64M"});
  if (TestRoot::json(root.nsbox({"inspect", "--json", id}))["home"]["kind"] != "image")
    NSBOX_SKIP_FOR("files quotas", "homes are directories without a size here (rootless): nothing fills up");
  REQUIRE(root.sh(id, "echo mine > ~/kept").exit_code == 0);
  // 62 MiB of files: under the 64 MiB volume the check measures them against, over what
  // its ext4 holds once its journal and tables are made, so the disk fills while writing.
  auto big = root.create({"--home-size", "256M"});
  REQUIRE(root.sh(big, "head -c 62M /dev/urandom > ~/big").exit_code == 0);
  auto snap = first_line(root.nsbox({"snapshot", "create", big}).out);
  REQUIRE(snap.starts_with("snp-"));
  REQUIRE(root.nsbox({"stop", id}).exit_code == 0);
  auto full = root.nsbox({"start", id, "--from-snapshot", snap});
  INFO(full.err);
  CHECK(full.exit_code != 0);
  CHECK(full.err.find("No space left on device") != std::string::npos);
  CHECK(TestRoot::json(root.nsbox({"inspect", "--json", id}))["status"] == "stopped");
  for (const auto& name : nsbox::files::list_dir(root.path() + "/data/homes").value_or(std::vector<std::string>{}))
    CHECK(name.find(".making.") == std::string::npos);
  REQUIRE(root.nsbox({"start", id}).exit_code == 0);
  CHECK(root.sh(id, "cat ~/kept; ls ~").out == "mine\nkept\n");
}

TEST_CASE("a snapshot holding /mnt/files is not restored into a named volume, at create or at start", "[snapshot]") {
  TestRoot root;
  auto id = root.create({"--volume", "shared"});
  REQUIRE(root.sh(id, "echo shared > /mnt/files/kept").exit_code == 0);
  auto snap = first_line(root.nsbox({"snapshot", "create", id, "--include-files"}).out);
  REQUIRE(snap.starts_with("snp-"));
  auto created = root.nsbox({"create", "--volume", "shared", "--from-snapshot", snap});
  CHECK(created.exit_code != 0);
  CHECK(created.err.find("not the named volume 'shared'") != std::string::npos);
  REQUIRE(root.nsbox({"stop", id}).exit_code == 0);
  auto started = root.nsbox({"start", id, "--from-snapshot", snap});
  CHECK(started.exit_code != 0);
  CHECK(started.err.find("not the named volume 'shared'") != std::string::npos);
  REQUIRE(root.nsbox({"start", id}).exit_code == 0);
  CHECK(root.sh(id, "cat /mnt/files/kept").out == "shared\n");
}
