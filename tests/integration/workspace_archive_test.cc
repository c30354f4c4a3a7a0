// The workspace root as one tar archive (docs/semantics.md, "Workspace archives"):
// `nsbox workspace ID export` packs it from the host side without following a link, of a
// running or stopped sandbox; `import` replaces a running sandbox's with an archive,
// checked whole first, unpacked inside the sandbox as its user.
#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "tests/support/host_features.h"
#include "tests/support/nsbox_cli.h"
#include "tests/support/object_store_peers.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

using nsbox::test::run_process;
using nsbox::test::TestRoot;

namespace {

// `tar -tv`'s listing of an archive: "path" or "path -> target", one a line, sorted.
std::string listing(const std::string& archive) {
  auto r = run_process({"/usr/bin/python3.11", "-c",
                        "import sys, tarfile\n"
                        "t = tarfile.open(sys.argv[1])\n"
                        "print('\\n'.join(sorted(m.name + (' -> ' + m.linkname if m.issym() else '') for m in t)))",
                        archive});
  REQUIRE(r.exit_code == 0);
  return r.out;
}

// A tar archive written by Python's tarfile from `members` (a Python list literal of
// (name, kind, data) with kind "file", "dir", "symlink" or "fifo").
void write_tar(const std::string& path, const std::string& members) {
  auto r = run_process({"/usr/bin/python3.11", "-c",
                        "import io, sys, tarfile\n"
                        "with tarfile.open(sys.argv[1], 'w') as t:\n"
                        "  for name, kind, data in " + members + ":\n"
                        "    m = tarfile.TarInfo(name)\n"
                        "    m.type = {'file': tarfile.REGTYPE, 'dir': tarfile.DIRTYPE, 'symlink': tarfile.SYMTYPE, 'fifo': tarfile.FIFOTYPE}[kind]\n"
                        "    m.mode = 0o755 if kind == 'dir' else 0o640\n"
                        "    if kind == 'symlink': m.linkname = data\n"
                        "    if kind == 'file': m.size = len(data)\n"
                        "    t.addfile(m, io.BytesIO(data.encode()) if kind == 'file' else None)\n",
                        path});
  REQUIRE(r.exit_code == 0);
}

}  // namespace

TEST_CASE("a workspace exports as a tar of its files and links, leaving out links out of it, mounts and ephemeral entries") {
  TestRoot root;
  nsbox::test::TempDir dir;
  const std::string manifest = dir.path() + "/manifest.json";
  std::ofstream(manifest) << R"({"version": 1, "root": "/workspace",
    "entries": {"kept.txt": {"type": "file", "content": "kept\n"}, "scratch": {"type": "dir", "ephemeral": true}}})";
  auto id = root.create({"--manifest", manifest, "--lazy-kernel"});
  REQUIRE(root.sh(id, "mkdir -p a/b && echo hi > a/b/f && chmod 600 a/b/f && ln -s b a/link && ln -s /etc/passwd out && "
                      "echo x > scratch/tmp && echo dot > ~/.in-home")
              .exit_code == 0);
  const std::string archive = dir.path() + "/ws.tar";
  auto exported = root.nsbox({"workspace", id, "export", archive});
  REQUIRE(exported.exit_code == 0);
  CHECK(exported.out.find("1 left out (out -> /etc/passwd)") != std::string::npos);
  // The workspace's own files only: not the home's dotfiles, not the ephemeral entry's.
  CHECK(listing(archive) == "a\na/b\na/b/f\na/link -> b\nkept.txt\n");

  // A stopped sandbox exports the same, to stdout.
  REQUIRE(root.nsbox({"stop", id}).exit_code == 0);
  auto streamed = root.nsbox({"workspace", id, "export", "-"});
  REQUIRE(streamed.exit_code == 0);
  const std::string again = dir.path() + "/again.tar";
  std::ofstream(again, std::ios::binary) << streamed.out;
  CHECK(listing(again) == listing(archive));
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}

TEST_CASE("an import replaces the workspace, and a hostile archive is refused with the workspace unchanged") {
  TestRoot root;
  nsbox::test::TempDir dir;
  auto id = root.create({"--lazy-kernel"});
  REQUIRE(root.sh(id, "echo old > old.txt && mkdir keep && echo k > keep/k").exit_code == 0);
  const std::string good = dir.path() + "/good.tar";
  write_tar(good, R"([("src", "dir", ""), ("src/main.py", "file", "print(1)\n"), ("src/link", "symlink", "main.py")])");
  auto imported = root.nsbox({"workspace", id, "import", good});
  REQUIRE(imported.exit_code == 0);
  CHECK(imported.out.find("into /home/user") != std::string::npos);
  CHECK(root.sh(id, "ls -A; cat src/link; stat -c '%a %U' src/main.py").out == "src\nprint(1)\n640 user\n");

  const std::pair<const char*, const char*> hostile[] = {
      {R"([("../escape", "file", "x")])", ".."},
      {R"([("out", "symlink", "/etc/shadow")])", "out"},
      {R"([("pipe", "fifo", "")])", "pipe"},
  };
  for (const auto& [members, named] : hostile) {
    INFO(members);
    const std::string bad = dir.path() + "/bad.tar";
    write_tar(bad, members);
    auto refused = root.nsbox({"workspace", id, "import", bad});
    CHECK(refused.exit_code != 0);
    CHECK(refused.err.find(named) != std::string::npos);
    CHECK(root.sh(id, "ls -A").out == "src\n");  // unchanged, nothing left beside it
  }
  auto garbage = root.nsbox({"--json", "workspace", id, "import", "-"}, {.stdin_data = "not a tar"});
  CHECK(garbage.exit_code != 0);
  CHECK((garbage.out + garbage.err).find("\"invalid_argument\"") != std::string::npos);  // the caller's bytes, not the system's failure
  CHECK(root.sh(id, "ls -A").out == "src\n");
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}

TEST_CASE("an import keeps a bucket mounted deep in the workspace where it is, and the archive's files around it") {
  NSBOX_NEEDS(nsbox::test::node_peers());
  NSBOX_NEEDS(nsbox::test::fuse_device());
  nsbox::test::S3rverPeer s3({"deep"});
  TestRoot root;
  nsbox::test::TempDir dir;
  const std::string manifest = dir.path() + "/manifest.json";
  std::ofstream(manifest) << R"({"version": 1, "root": "/workspace", "entries": {
    "data/ro": {"type": "s3", "bucket": "deep", "read_only": false},
    "data/notes.txt": {"type": "file", "content": "old\n"}, "top.txt": {"type": "file", "content": "old\n"}}})";
  auto created = root.nsbox({"create", "--manifest", manifest, "--lazy-kernel"},
                            {.extra_env = nsbox::test::s3_credentials_env(s3, "nsbox-test-secret")});
  INFO(created.err);
  REQUIRE(created.exit_code == 0);
  std::string id = created.out.substr(0, created.out.find('\n'));
  REQUIRE(root.sh(id, "echo in-bucket > data/ro/obj && mkdir -p data/sub && echo s > data/sub/s").exit_code == 0);

  const std::string archive = dir.path() + "/new.tar";
  write_tar(archive, R"([("data", "dir", ""), ("data/notes.txt", "file", "new\n"), ("data/ro", "file", "shadow"),
                        ("data/fresh", "file", "f\n"), ("top.txt", "file", "new\n")])");
  auto imported = root.nsbox({"workspace", id, "import", archive});
  INFO(imported.err);
  REQUIRE(imported.exit_code == 0);
  // The archive's files around the mount; the old ones gone; the mount where it was, its
  // object there; nothing of the swap left behind.
  CHECK(root.sh(id, "cd /workspace && cat top.txt data/notes.txt data/fresh data/ro/obj && ls -A && ls -A data && "
                    "grep -c ' /workspace/data/ro ' /proc/self/mountinfo")
            .out == "new\nnew\nf\nin-bucket\ndata\ntop.txt\nfresh\nnotes.txt\nro\n1\n");
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}
