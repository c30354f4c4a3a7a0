// Hostile code in a sandbox against its snapshots and the host's copies of its files
// (issue 33, finding 6): files made to cost the host disk and time out of proportion to
// what they cost the sandbox, or to make the sandbox's own snapshot unrestorable.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "isolation/sys/files.h"
#include "isolation/sys/unique_fd.h"
#include "tests/support/host_features.h"
#include "tests/support/nsbox_cli.h"
#include "tests/support/temp_dir.h"

using namespace nsbox::test;
using nlohmann::json;

namespace {

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

std::string archiver() {
  return (std::filesystem::path(nsbox_binary()).parent_path().parent_path() / "libexec/nsbox/sandbox/nsbox-archive").string();
}

// The line of /proc/PID/status that starts with `key` ("Uid:"), without it.
std::string status_line(pid_t pid, const std::string& key) {
  auto status = nsbox::files::read_file("/proc/" + std::to_string(pid) + "/status");
  REQUIRE(status);
  auto at = status->find("\n" + key);
  REQUIRE(at != std::string::npos);
  at = status->find_first_not_of("\t ", at + key.size() + 1);
  return status->substr(at, status->find('\n', at) - at);
}

uint64_t file_size(const std::string& path) {
  struct stat st{};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace

TEST_CASE("sparse files made inside cost a snapshot their data, and it restores into a home of the same size with its holes",
          "[snapshot][sparse]") {
  TestRoot root;
  auto id = root.create();  // the default home: 1 GiB
  // 1 GiB with 164 KiB of data (the review's file), and 4 TiB with 3 bytes: 4 TiB and
  // 1 GiB of zeros on the host, and a snapshot no home could take, if holes were stored.
  REQUIRE(root.sh(id, "truncate -s 1G ~/sparse && head -c 164K /dev/urandom | dd of=$HOME/sparse conv=notrunc status=none && "
                      "printf end | dd of=$HOME/sparse bs=1 seek=$((512 << 20)) conv=notrunc status=none && "
                      "truncate -s 4T ~/huge && printf end >> ~/huge")
              .exit_code == 0);
  std::string before = root.sh(id, "cd ~ && stat -c '%n %s' sparse huge && sha256sum sparse && tail -c 3 huge").out;

  auto made = root.nsbox({"snapshot", "create", "--json", id});
  INFO(made.err);
  REQUIRE(made.exit_code == 0);
  auto snap = TestRoot::json(made);
  CHECK(snap["bytes"].get<uint64_t>() < (1u << 20));
  std::string dir = root.path() + "/data/snapshots/" + snap["id"].get<std::string>();
  CHECK(file_size(dir + "/home.tar") < (1u << 20));

  auto copy = root.nsbox({"create", "--from-snapshot", snap["id"]});
  INFO(copy.err);
  REQUIRE(copy.exit_code == 0);
  std::string restored = first_line(copy.out);
  CHECK(root.sh(restored, "cd ~ && stat -c '%n %s' sparse huge && sha256sum sparse && tail -c 3 huge").out == before);
  // Restored with its holes: what the blocks hold, in KiB.
  auto used = root.sh(restored, "du -k ~/sparse ~/huge | cut -f1");
  REQUIRE(used.exit_code == 0);
  CHECK(std::stoull(used.out) < 1024);
  CHECK(std::stoull(used.out.substr(used.out.find('\n') + 1)) < 1024);
}

TEST_CASE("nsbox-archive opens a store's archive as root, then reads it with the sandbox user's ids only", "[snapshot]") {
  NSBOX_NEEDS(root());  // nsbox-archive drops root's ids
  TempDir dir("nsbox-check-ids");
  // A FIFO only root may open, standing for a fetched archive: the test controls when its
  // bytes come, and sees whose ids parse them while nsbox-archive waits for them.
  std::string archive = dir.path() + "/home.tar";
  REQUIRE(::mkfifo(archive.c_str(), 0600) == 0);
  BackgroundProcess check({archiver(), "check", "--archive", archive, "--uid", "65534", "--gid", "65534"});
  nsbox::UniqueFd bytes(::open(archive.c_str(), O_WRONLY | O_CLOEXEC));  // once it has opened it
  REQUIRE(bytes);
  // Until it waits in read(2), parsing.
  bool reading = false;
  for (int i = 0; i < 1000 && !reading; ++i) {
    auto call = nsbox::files::read_file("/proc/" + std::to_string(check.pid()) + "/syscall");
    reading = call && call->starts_with(std::to_string(SYS_read) + " ");
    if (!reading) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  INFO(check.output());
  REQUIRE(reading);
  CHECK(status_line(check.pid(), "Uid:") == "65534\t65534\t65534\t65534");
  CHECK(status_line(check.pid(), "Gid:") == "65534\t65534\t65534\t65534");
  CHECK(status_line(check.pid(), "Groups:").empty());
  CHECK(status_line(check.pid(), "CapEff:") == "0000000000000000");
  std::string end_of_archive(1024, '\0');
  REQUIRE(::write(bytes.get(), end_of_archive.data(), end_of_archive.size()) == 1024);
  bytes.reset();
  // (A FIFO cannot be rewound for an unpack: the check ends refusing it, which is not what
  // this test is about.)
  CHECK_FALSE(check.wait().timed_out);

  // Without the ids, as root, nothing is read.
  auto refused = run_process({archiver(), "check", "--archive", "/dev/null"});
  CHECK(refused.exit_code == 1);
  CHECK(refused.err.find("never as root: give --uid and --gid") != std::string::npos);
}

TEST_CASE("upload_local_file of a sparse file made inside copies its data, not its holes, to the volume and the host", "[sparse]") {
  TestRoot root;
  auto id = root.create();
  auto r = root.cell(id, R"PY(import json, os
with open("/tmp/sparse.bin", "wb") as f:
    f.write(b"head"); f.seek(512 << 20); f.write(b"end")
print(json.dumps(upload_local_file("/tmp/sparse.bin")))
)PY");
  INFO(r.dump());
  REQUIRE(r["status"] == "ok");
  auto answer = json::parse(r["stdout"].get<std::string>());
  REQUIRE(answer[1].is_null());
  const json& up = answer[0];
  CHECK(up["size"] == (512ull << 20) + 3);
  std::string volume_copy = up["sandbox_path"];
  auto used = root.sh(id, "du -k '" + volume_copy + "' | cut -f1; tail -c 3 '" + volume_copy + "'");
  REQUIRE(used.exit_code == 0);
  CHECK(std::stoull(used.out) < 1024);
  CHECK(used.out.ends_with("\nend"));
  std::string host_copy = up["url"].get<std::string>().substr(std::string("file://").size());
  struct stat st{};
  REQUIRE(::stat(host_copy.c_str(), &st) == 0);
  CHECK(static_cast<uint64_t>(st.st_size) == (512ull << 20) + 3);
  CHECK(static_cast<uint64_t>(st.st_blocks) * 512 < (1u << 20));
}

TEST_CASE("a file given several names inside costs a snapshot once, and it restores into a home of the same size with its links",
          "[snapshot]") {
  TestRoot root;
  auto id = root.create({"--home-size", "64M"});
  // Three names of 24 MiB: 72 MiB as copies, more than the home the snapshot came from.
  REQUIRE(root.sh(id, "head -c 24M /dev/urandom > ~/a && mkdir ~/sub && ln ~/a ~/sub/b && ln ~/a ~/c").exit_code == 0);
  std::string before = root.sh(id, "cd ~ && sha256sum a sub/b c").out;
  auto made = root.nsbox({"snapshot", "create", "--json", id});
  INFO(made.err);
  REQUIRE(made.exit_code == 0);
  auto snap = TestRoot::json(made);
  CHECK(snap["bytes"].get<uint64_t>() < (32u << 20));
  auto copy = root.nsbox({"create", "--home-size", "64M", "--from-snapshot", snap["id"]});
  INFO(copy.err);
  REQUIRE(copy.exit_code == 0);
  std::string restored = first_line(copy.out);
  CHECK(root.sh(restored, "cd ~ && sha256sum a sub/b c").out == before);
  CHECK(root.sh(restored, "cd ~ && stat -c %h:%i a sub/b c | uniq | wc -l; stat -c %h a").out == "1\n3\n");
}

TEST_CASE("a store's archive with a sparse map of millions of runs costs nsbox-archive a bounded memory, and is refused",
          "[snapshot][sparse]") {
  // 8 million empty runs in 32 MB: libarchive lists them before nsbox sees the entry (about
  // 48 bytes each: 372 MiB here, and ~50 GB for an archive of the 4 GiB a store may send).
  const std::string script = R"PY(import io, resource, subprocess, sys, tarfile
n = 8_000_000
runs = b"%d\n" % n + b"0\n0\n" * n
runs += b"\0" * (-len(runs) % 512)
info = tarfile.TarInfo("GNUSparseFile.0/f"); info.size = len(runs)
info.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": "f", "GNU.sparse.realsize": "0"}
with tarfile.open(sys.argv[2], "w", format=tarfile.PAX_FORMAT) as t:
    t.addfile(info, io.BytesIO(runs))
r = subprocess.run([sys.argv[1], "check", "--archive", sys.argv[2], "--uid", "65534", "--gid", "65534"], capture_output=True)
print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
)PY";
  TempDir dir("nsbox-map");
  auto r = run_process({"/usr/bin/python3.11", "-c", script, archiver(), dir.path() + "/home.tar"}, {.timeout_s = 120});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  uint64_t status = 0, peak_kib = 0;
  REQUIRE(std::sscanf(r.out.c_str(), "%lu %lu", &status, &peak_kib) == 2);
  CHECK(status != 0);
  CHECK(peak_kib < 300 * 1024);
}
