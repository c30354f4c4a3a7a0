// The files volume (/mnt/files) and the files API: round trips, listing, safety against
// what the sandbox puts in its volume, atomicity, quotas, persistence, named volumes.
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <functional>
#include <future>
#include <set>
#include <sstream>
#include <thread>

#include "isolation/sys/files.h"
#include "isolation/sys/sha256.h"
#include "isolation/sys/unique_fd.h"
#include "mounts/volume_image.h"
#include "runtime/core/volume_store.h"
#include "tests/support/host_features.h"
#include "tests/support/nsbox_cli.h"

using namespace nsbox::test;
using nlohmann::json;

namespace {

std::string write_local(const TestRoot& root, const std::string& name, const std::string& data) {
  std::string path = root.path() + "/" + name;
  REQUIRE(nsbox::files::atomic_write(path, data, 0644));
  return path;
}

json upload(const TestRoot& root, const std::string& id, const std::string& local, const std::string& remote) {
  auto r = root.nsbox({"files", "--json", id, "upload", local, remote, "--max-size", "1G"}, {.timeout_s = 300});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return TestRoot::json(r);
}

}  // namespace

TEST_CASE("files round-trip byte-exact: empty, small, binary, 200 MiB, names with spaces and UTF-8") {
  TestRoot root;
  auto id = root.create();
  std::string binary;
  for (int i = 0; i < 300000; ++i) binary += static_cast<char>((i * 7919) & 0xff);
  std::string big(200u << 20, '\0');
  for (size_t i = 0; i < big.size(); i += 4096) big[i] = static_cast<char>(i >> 12);
  struct Case { std::string remote, data; };
  for (const Case& c : {Case{"empty", ""}, Case{"small.txt", "hello\n"}, Case{"bin/data.bin", binary},
                        Case{"dir with space/naïve résumé ✓.txt", "unicode\n"}, Case{"big.bin", big}}) {
    INFO(c.remote);
    std::string local = write_local(root, "local", c.data);
    auto up = upload(root, id, local, c.remote);
    CHECK(up["sandbox_mount_prefix"] == "/mnt/files");
    CHECK(up["mount_relative_path"] == c.remote);
    CHECK(up["size"] == c.data.size());
    CHECK(up["sha256"] == nsbox::sha256_hex(c.data));
    // The sandbox sees the same bytes at once...
    auto inside = root.sh(id, "sha256sum < '/mnt/files/" + c.remote + "'");
    CHECK(inside.out.substr(0, 64) == nsbox::sha256_hex(c.data));
    // ...and they come back the same.
    CHECK(nsbox::sha256_hex(root.download(id, c.remote)) == nsbox::sha256_hex(c.data));
  }
  std::string dest = root.path() + "/back";
  CHECK(root.nsbox({"files", id, "download", "small.txt", dest}).exit_code == 0);
  CHECK(*nsbox::files::read_file(dest) == "hello\n");
  auto again = root.nsbox({"files", id, "download", "small.txt", dest});
  CHECK(again.exit_code == 1);
  CHECK(again.err.find("exists") != std::string::npos);
  CHECK(root.nsbox({"files", id, "download", "bin/data.bin", dest, "--force"}).exit_code == 0);
  CHECK(nsbox::files::read_file(dest, 1 << 20)->size() == binary.size());
}

TEST_CASE("a directory uploads recursively, stdin uploads with -, and rm removes, recursively with -r") {
  TestRoot root;
  auto id = root.create();
  std::string local = root.path() + "/tree";
  REQUIRE(nsbox::files::make_dirs(local + "/a/b"));
  REQUIRE(nsbox::files::atomic_write(local + "/top.txt", "top\n", 0644));
  REQUIRE(nsbox::files::atomic_write(local + "/a/b/deep.txt", "deep\n", 0644));
  auto up = TestRoot::json(root.nsbox({"files", "--json", id, "upload", local, "project"}));
  CHECK(up["uploaded"].size() == 2);
  CHECK(root.sh(id, "cat /mnt/files/project/top.txt /mnt/files/project/a/b/deep.txt").out == "top\ndeep\n");
  auto piped = root.nsbox({"files", id, "upload", "-", "from-stdin.txt"}, {.stdin_data = "piped\n"});
  CHECK(piped.exit_code == 0);
  CHECK(root.download(id, "from-stdin.txt") == "piped\n");
  // A REMOTE ending in / puts the file inside that directory, like cp; stdin needs a name.
  REQUIRE(root.nsbox({"files", id, "upload", local + "/top.txt", "inbox/"}).exit_code == 0);
  CHECK(root.download(id, "inbox/top.txt") == "top\n");
  CHECK(root.nsbox({"files", id, "upload", "-", "inbox/"}, {.stdin_data = "x"}).err.find("stdin needs a file name") !=
        std::string::npos);
  auto not_empty = root.nsbox({"files", id, "rm", "project"});
  CHECK(not_empty.exit_code == 2);
  CHECK(not_empty.err.find("project is a directory that is not empty") != std::string::npos);
  CHECK(not_empty.err.find("remove it with -r") != std::string::npos);
  CHECK(root.nsbox({"files", id, "rm", "project", "-r"}).exit_code == 0);
  CHECK(root.sh(id, "test -e /mnt/files/project; echo $?").out == "1\n");
  CHECK(root.nsbox({"files", id, "rm", "nothing-here"}).err.find("no nothing-here") != std::string::npos);
}

TEST_CASE("listing pages through 10,000 files with a cursor that stays valid while files are added") {
  TestRoot root;
  auto id = root.create();
  REQUIRE(root.sh(id, "mkdir /mnt/files/many && cd /mnt/files/many && for i in $(seq -w 1 10000); do : > f$i; done").exit_code == 0);
  std::set<std::string> seen;
  std::string cursor;
  int pages = 0;
  for (;;) {
    std::vector<std::string> args = {"files", "--json", id, "ls", "many", "--limit", "1000"};
    if (!cursor.empty()) args.insert(args.end(), {"--cursor", cursor});
    auto page = TestRoot::json(root.nsbox(args));
    for (const auto& e : page["entries"]) {
      CHECK(e["type"] == "file");
      CHECK(seen.insert(e["name"].get<std::string>()).second);  // never twice
    }
    if (++pages == 3) REQUIRE(root.sh(id, "touch /mnt/files/many/a-new /mnt/files/many/z-new").exit_code == 0);
    if (page["next_cursor"].is_null()) break;
    cursor = page["next_cursor"].get<std::string>();
    REQUIRE(pages < 20);
  }
  CHECK(seen.count("f00001"));
  CHECK(seen.count("f10000"));
  CHECK(seen.count("z-new"));  // added after the cursor's position: still listed
  CHECK(seen.size() == 10001);  // a-new sorts before the cursor by then: not repeated, not required
}

TEST_CASE("paths leaving the volume and symlinks made inside are refused") {
  TestRoot root;
  auto id = root.create();
  std::string local = write_local(root, "x", "x\n");
  for (const char* bad : {"../escape", "/etc/escape", "a/../../escape"}) {
    auto r = root.nsbox({"files", "--json", id, "upload", local, bad});
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("invalid_argument") != std::string::npos);
  }
  CHECK(root.nsbox({"files", id, "download", "../../../etc/passwd", "-"}).exit_code == 2);
  // The sandbox points names at the host's files and directories.
  REQUIRE(root.sh(id, "cd /mnt/files && ln -s /etc/passwd passwd-link && ln -s /etc etc-link && ln -s / root-link").exit_code == 0);
  auto read_link = root.nsbox({"files", id, "download", "passwd-link", "-"});
  CHECK(read_link.exit_code != 0);
  CHECK(read_link.out.find("root:") == std::string::npos);
  CHECK(read_link.err.find("symlink") != std::string::npos);
  CHECK(root.nsbox({"files", id, "download", "etc-link/passwd", "-"}).out.find("root:") == std::string::npos);
  CHECK(root.nsbox({"files", id, "upload", local, "etc-link/planted"}).exit_code != 0);
  CHECK_FALSE(nsbox::files::exists("/etc/planted"));
  CHECK(root.nsbox({"files", id, "ls", "root-link"}).exit_code != 0);
  // An upload to a symlink's name replaces the link; the host file it pointed to is untouched.
  CHECK(root.nsbox({"files", id, "upload", local, "passwd-link"}).exit_code == 0);
  CHECK(root.sh(id, "cat /mnt/files/passwd-link").out == "x\n");
  CHECK(nsbox::files::read_file("/etc/passwd")->find("root:") != std::string::npos);
}

TEST_CASE("a symlink swapped in during downloads never yields the host's file") {
  TestRoot root;
  auto id = root.create();
  // Inside: a loop that keeps replacing `target` by a real file and by a link to the
  // host's /etc/shadow-like secret /etc/passwd.
  REQUIRE(root.sh(id, "cd /mnt/files && (while :; do echo safe > t.tmp && mv -f t.tmp target; ln -sfn /etc/passwd target; done) "
                      "> /dev/null 2>&1 & echo $! > /tmp/swapper").exit_code == 0);
  REQUIRE(root.wait_for_file(id, "/mnt/files/target"));  // the race is on
  int safe = 0, refused = 0, other = 0;
  std::string other_errors;
  for (int i = 0; i < 60; ++i) {
    auto r = root.nsbox({"files", id, "download", "target", "-"});
    CHECK(r.out.find("root:") == std::string::npos);
    if (r.exit_code == 0) {
      CHECK(r.out == "safe\n");
      ++safe;
    } else if (r.err.find("symlink") != std::string::npos) {
      ++refused;
    } else {
      ++other;  // the name between an unlink and its replacement, say
      other_errors += r.err;
    }
  }
  INFO(safe << " read, " << refused << " refused as symlinks, " << other << " other failures: " << other_errors);
  // Both sides of the race were met: the file was read and the link refused.
  CHECK(safe > 0);
  CHECK(refused > 0);
  CHECK(safe + refused + other == 60);
  // And the swapper ran all along.
  CHECK(root.sh(id, "kill -0 $(cat /tmp/swapper) && echo running").out == "running\n");
  root.sh(id, "kill $(cat /tmp/swapper)");
  // A FIFO where a file was expected is refused at once, not waited on (bounded: 20 s).
  REQUIRE(root.sh(id, "mkfifo /mnt/files/chart.png").exit_code == 0);
  auto fifo = root.nsbox({"files", id, "download", "chart.png", "-"}, {.timeout_s = 20});
  CHECK(fifo.exit_code == 2);
  CHECK(fifo.err.find("chart.png is not a regular file") != std::string::npos);
}

TEST_CASE("an interrupted upload leaves the old content and no partial file") {
  TestRoot root;
  auto id = root.create();
  REQUIRE(root.sh(id, "echo old > /mnt/files/report.csv").exit_code == 0);
  // The new content comes through a FIFO that stalls: the upload is killed half way, once
  // the first 3 MB have gone into it (the generator then leaves a marker and stalls). The
  // generator and the upload are both ended by their pids.
  std::string fifo = root.path() + "/fifo", sent = root.path() + "/sent";
  std::string cmd = "mkfifo " + fifo + "; (head -c 3000000 /dev/zero; : > " + sent + "; exec sleep 30) > " + fifo +
                    " 2>/dev/null & gen=$!; " + nsbox_binary() + " --root " + root.path() + " files " + id +
                    " upload - report.csv < " + fifo + " & pid=$!; " + "for i in $(seq 1200); do [ -e " + sent +
                    " ] && break; sleep 0.05; done; [ -e " + sent + " ] && echo sent; kill -KILL $pid; kill $gen; wait; echo killed";
  auto r = run_process({"/bin/sh", "-c", cmd}, {.timeout_s = 90});
  CHECK(r.out == "sent\nkilled\n");
  CHECK(root.sh(id, "cat /mnt/files/report.csv").out == "old\n");
  auto listing = TestRoot::json(root.nsbox({"files", "--json", id, "ls"}));
  for (const auto& e : listing["entries"]) CHECK(e["name"].get<std::string>().find("report.csv.") == std::string::npos);
  // Not even in the staging directory: the data was in an unnamed file.
  CHECK(root.sh(id, "ls -A /mnt/files/.nsbox/uploads | wc -l").out == "0\n");
}

TEST_CASE("an upload survives the supervisor's death half way: it never went through it") {
  TestRoot root;
  auto id = root.create();
  auto info = TestRoot::json(root.nsbox({"inspect", "--json", id}));
  // The content stalls in a FIFO once its first 3 MB are in (a marker says so); the
  // supervisor is SIGKILLed then; then the rest comes (the test releases it).
  std::string fifo = root.path() + "/fifo", half = root.path() + "/half-sent", go_on = root.path() + "/go-on";
  std::string cmd = "mkfifo " + fifo + "; (head -c 3000000 /dev/urandom > " + root.path() + "/sent; cat " + root.path() +
                    "/sent; : > " + half + "; for i in $(seq 1200); do [ -e " + go_on + " ] && break; sleep 0.05; done; echo tail) > " +
                    fifo + " & " + nsbox_binary() + " --root " + root.path() + " files " + id + " upload - late.bin < " + fifo +
                    "; echo status $?";
  auto upload = std::async(std::launch::async, [&] { return run_process({"/bin/sh", "-c", cmd}, {.timeout_s = 120}); });
  bool half_sent = false;
  for (int i = 0; i < 1200 && !half_sent; ++i) {
    half_sent = nsbox::files::exists(half);
    if (!half_sent) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  pid_t supervisor = info["supervisor_pid"].get<pid_t>();
  bool killed = half_sent && ::kill(supervisor, SIGKILL) == 0;
  // Dead before the rest comes: inspect says so once the supervisor's lock is gone.
  bool dead = false;
  for (int i = 0; killed && i < 400 && !dead; ++i) {
    dead = TestRoot::json(root.nsbox({"inspect", "--json", id}))["status"] == "dead";
    if (!dead) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  REQUIRE(nsbox::files::atomic_write(go_on, "", 0644));  // the upload ends either way
  auto r = upload.get();
  INFO(r.err);
  REQUIRE(half_sent);
  REQUIRE(killed);
  CHECK(dead);
  CHECK(r.out.find("status 0") != std::string::npos);
  auto sent = nsbox::files::read_file(root.path() + "/sent", 8 << 20);
  REQUIRE(sent);
  CHECK(root.download(id, "late.bin") == *sent + "tail\n");
  CHECK(TestRoot::json(root.nsbox({"inspect", "--json", id}))["status"] == "dead");
}

TEST_CASE("the quota holds from inside and outside, and the upload size limit too") {
  TestRoot root;
  auto id = root.create({"--files-quota", "64M"});
  auto info = TestRoot::json(root.nsbox({"inspect", "--json", id}));
  // As root with loop devices the volume is an image: a directory here would be a volume
  // without its quota, not a reason to pass.
  if (!loop_devices().present) {
    CHECK(info["files"]["kind"] == "directory");
    NSBOX_SKIP_FOR(loop_devices().doctor, "no quota to test: " + loop_devices().absent_because);
  }
  REQUIRE(info["files"]["kind"] == "image");
  CHECK(info["files"]["quota_bytes"] == 64u << 20);
  auto fill = root.sh(id, "head -c 100M /dev/zero > /mnt/files/big; echo $?");
  CHECK(fill.err.find("No space left on device") != std::string::npos);
  CHECK(fill.out == "1\n");
  REQUIRE(root.sh(id, "rm /mnt/files/big").exit_code == 0);
  std::string large = write_local(root, "large", std::string(80u << 20, 'q'));
  auto over = root.nsbox({"files", "--json", id, "upload", large, "large", "--max-size", "1G"}, {.timeout_s = 120});
  CHECK(over.exit_code == 1);
  CHECK(over.err.find("the files volume is full") != std::string::npos);
  CHECK(root.sh(id, "ls /mnt/files/large 2>&1; ls /mnt/files/.nsbox/uploads | wc -l").out.find("No such file") != std::string::npos);
  // The host keeps no more than the quota (the image is sparse).
  struct stat st{};
  REQUIRE(::stat(info["files"]["path"].get<std::string>().c_str(), &st) == 0);
  CHECK(static_cast<uint64_t>(st.st_blocks) * 512 < (80u << 20));
  // And no single upload past the per-file limit (100 MiB unless --max-size).
  std::string two_mib = write_local(root, "two", std::string(2u << 20, 'x'));
  auto limited = root.nsbox({"files", id, "upload", two_mib, "two", "--max-size", "1M"});
  CHECK(limited.exit_code == 2);
  CHECK(limited.err.find("--files-quota") == std::string::npos);
  CHECK(root.nsbox({"create", "--files-quota", "3"}).err.find("invalid size") != std::string::npos);
}

// LOOP_CTL_GET_FREE gives every asker the same device until one has configured it; twenty
// creates at once once ran out of retries ("no free loop device"). Three state roots (as
// three servers on one host), 24 clients each creating, removing and creating again, all
// at once: each of the 144 volumes kept gets its own device. (The old code failed when
// three such test processes ran at once; one process has not been seen to fail it.)
TEST_CASE("many sandboxes created at once each get their own loop devices", "[loop-devices]") {
  NSBOX_NEEDS(loop_devices());
  constexpr int kRoots = 3, kCreates = 24;
  std::vector<TestRoot> roots(kRoots);
  std::vector<ProcessResult> removed(kRoots * kCreates), created(kRoots * kCreates);
  std::vector<std::thread> threads;
  for (int i = 0; i < kRoots * kCreates; ++i)
    threads.emplace_back([&, i] {
      const auto& root = roots[i % kRoots];
      // One create and rm first: the devices it frees are the next ones GET_FREE offers.
      auto first = root.nsbox({"create", "--json"}, {.timeout_s = 120});
      if (first.exit_code != 0) {
        created[i] = first;
        return;
      }
      removed[i] = root.nsbox({"rm", json::parse(first.out)["id"].get<std::string>()}, {.timeout_s = 120});
      created[i] = root.nsbox({"create", "--json"}, {.timeout_s = 120});
    });
  for (auto& t : threads) t.join();
  std::set<std::string> devices;
  for (int i = 0; i < kRoots * kCreates; ++i) {
    INFO(removed[i].err);
    CHECK((created[i].exit_code != 0 || removed[i].exit_code == 0));
    const auto& r = created[i];
    const auto& root = roots[i % kRoots];
    INFO(r.err);
    CHECK(r.exit_code == 0);
    if (r.exit_code != 0) continue;
    auto id = json::parse(r.out)["id"].get<std::string>();
    CHECK(TestRoot::json(root.nsbox({"inspect", "--json", id}))["files"]["kind"] == "image");
    auto mounted = root.sh(id, "echo $$ > /mnt/files/mine && awk '$2 == \"/mnt/files\" {print $1}' /proc/mounts");
    CHECK(mounted.exit_code == 0);
    devices.insert(mounted.out);
  }
  CHECK(devices.size() == created.size());  // no two volumes on one device
}

// mkfs costs a process per image; a volume is a copy of its size's template, formatted
// once (docs/design.md, "Volumes"). Each copy is its own filesystem, the template is never attached, a
// dead maker's half-made template goes, and a store seeing many sizes keeps at most 16.
TEST_CASE("volumes are copies of one formatted template per size: each its own filesystem, at most 16 kept") {
  NSBOX_NEEDS(loop_devices());
  TestRoot root;
  const std::string volumes = root.path() + "/data/volumes";
  REQUIRE(nsbox::files::make_dirs(volumes, 0700));
  const std::string dead_maker = volumes + "/.template-1-2-3.img.making.999999999.1";  // no such pid
  REQUIRE(nsbox::files::atomic_write(dead_maker, "half", 0600));
  auto a = root.create({"--files-quota", "64M"});
  auto b = root.create({"--files-quota", "64M"});
  REQUIRE(root.sh(a, "echo only-a > /mnt/files/a.txt && head -c 8M /dev/urandom > /mnt/files/r && sync").exit_code == 0);
  CHECK(root.sh(b, "ls -A /mnt/files").out.empty());
  CHECK(root.sh(a, "cat /mnt/files/a.txt").out == "only-a\n");
  auto image_of = [&](const std::string& id) { return TestRoot::json(root.nsbox({"inspect", "--json", id}))["files"]["path"].get<std::string>(); };
  struct stat sa{}, sb{};
  REQUIRE(::stat(image_of(a).c_str(), &sa) == 0);
  REQUIRE(::stat(image_of(b).c_str(), &sb) == 0);
  CHECK(sa.st_ino != sb.st_ino);
  size_t templates = 0;
  auto names = nsbox::files::list_dir(volumes);
  REQUIRE(names);
  for (const auto& name : *names) templates += name.starts_with(".template-67108864-") && name.ends_with(".img");
  CHECK(templates == 1);
  // Never attached: no loop device is backed by it.
  auto devices = nsbox::files::list_dir("/sys/block").value_or(std::vector<std::string>{});
  for (const auto& dev : devices)
    CHECK(nsbox::files::read_file("/sys/block/" + dev + "/loop/backing_file").value_or("").find(".template-") == std::string::npos);
  CHECK_FALSE(nsbox::files::exists(dead_maker));  // swept when the template was made
  REQUIRE(root.nsbox({"rm", a, b}).exit_code == 0);

  for (int i = 0; i < 18; ++i) {
    auto created = root.nsbox({"create", "--json", "--files-quota", std::to_string(32 + i) + "M"});
    INFO(created.err);
    REQUIRE(created.exit_code == 0);
    REQUIRE(root.nsbox({"rm", json::parse(created.out)["id"].get<std::string>()}).exit_code == 0);
  }
  size_t kept = 0;
  names = nsbox::files::list_dir(volumes);
  REQUIRE(names);
  for (const auto& name : *names) kept += name.starts_with(".template-") && name.find(".making.") == std::string::npos;
  CHECK(kept <= 16);
  CHECK(kept >= 2);
}

// A new home holds the home skeleton from the start (the user site, matplotlib's font
// list), owned by the sandbox's user, with no kernel having run: it was formatted into the
// home template (kernel/tools/make_home_skeleton.py). A changed skeleton names another
// template, so no home is made from a template of an older one.
TEST_CASE("a new home starts with the home skeleton, and a changed skeleton makes another template") {
  NSBOX_NEEDS(loop_devices());
  namespace fs = std::filesystem;
  const fs::path skeleton = fs::path(nsbox::test::nsbox_binary()).parent_path().parent_path() / "libexec/nsbox/home-skeleton";
  REQUIRE(fs::is_directory(skeleton));
  std::vector<std::string> expected;
  for (const auto& e : fs::recursive_directory_iterator(skeleton))
    expected.push_back("/home/user/" + fs::relative(e.path(), skeleton).string() + (e.is_directory() ? " user 755" : " user 644"));
  std::sort(expected.begin(), expected.end());
  REQUIRE(std::find(expected.begin(), expected.end(), "/home/user/.local/lib/python3.11/site-packages user 755") != expected.end());
  TestRoot root;
  auto id = root.create({"--lazy-kernel"});  // no kernel: nothing made these in the sandbox
  auto listed = root.sh(id, "find /home/user -mindepth 1 -printf '%p %u %m\\n' | sort");
  std::vector<std::string> found;
  std::istringstream lines(listed.out);
  for (std::string line; std::getline(lines, line);) found.push_back(line);
  CHECK(found == expected);
  REQUIRE(root.nsbox({"rm", id}).exit_code == 0);

  // The store keyed by its skeleton: one template per skeleton, each home from its own.
  const std::string own = root.path() + "/skeleton";
  REQUIRE(nsbox::files::make_dirs(own + "/.config", 0755));
  nsbox::StateRoot state{root.path() + "/run", root.path() + "/data"};
  auto home_with = [&](const std::string& name) {
    auto made = nsbox::VolumeStore(state, nsbox::VolumeKind::kHome, own).create(name, false, 64 << 20);
    INFO((made ? std::string() : made.error().message));
    REQUIRE(made);
    return *made;
  };
  auto first = home_with("first");
  REQUIRE(nsbox::files::atomic_write(own + "/.config/added", "added later\n", 0644));
  auto second = home_with("second");
  auto has_added = [](const nsbox::Volume& v) {
    auto dir = nsbox::volume_image::open_privately(v.path);
    REQUIRE(dir);
    struct stat st{};
    return ::fstatat(dir->get(), ".config/added", &st, 0) == 0;
  };
  CHECK_FALSE(has_added(first));
  CHECK(has_added(second));
  size_t templates = 0;
  for (const auto& name : nsbox::files::list_dir(root.path() + "/data/homes").value_or(std::vector<std::string>{}))
    templates += name.starts_with(".template-67108864-") && name.ends_with(".img");
  CHECK(templates == 2);
  nsbox::VolumeStore homes(state, nsbox::VolumeKind::kHome);
  CHECK(homes.remove(first));
  CHECK(homes.remove(second));
}

TEST_CASE("on a small disk the default quota shrinks to fit, and a larger explicit one is refused") {
  TestRoot root;
  SmallDisk disk(root, "3g");
  auto nsbox = [&](const std::vector<std::string>& args) { return disk.nsbox(args); };
  auto created = nsbox({"create", "--json"});
  INFO(created.err);
  REQUIRE(created.exit_code == 0);
  auto id = json::parse(created.out)["id"].get<std::string>();
  auto info = json::parse(nsbox({"inspect", "--json", id}).out);
  if (!loop_devices().present) {
    CHECK(info["files"]["kind"] == "directory");
    NSBOX_SKIP_FOR(loop_devices().doctor, "no quota to test: " + loop_devices().absent_because);
  }
  REQUIRE(info["files"]["kind"] == "image");
  uint64_t quota = info["files"]["quota_bytes"];
  CHECK(quota >= (1ull << 30));
  CHECK(quota <= (3ull << 30) / 2);
  CHECK(quota % (256ull << 20) == 0);
  auto fill = nsbox({"sh", id, "--", "head -c 2G /dev/zero > /mnt/files/big; echo $?"});
  CHECK(fill.err.find("No space left on device") != std::string::npos);  // the quota, not the disk
  auto too_big = nsbox({"create", "--files-quota", "5G"});
  CHECK(too_big.exit_code == 1);
  INFO(too_big.err);
  CHECK(too_big.err.find("a files quota of 5") != std::string::npos);
  CHECK(too_big.err.find("is more than the") != std::string::npos);
}

TEST_CASE("the volume survives kernel restarts, resize and supervisor death, and goes with rm unless kept", "[zygote]") {
  TestRoot root;
  auto id = root.create();
  std::string local = write_local(root, "keep", "keep me\n");
  upload(root, id, local, "keep.txt");
  root.nsbox({"restart", id});
  root.nsbox({"exec", id, "-c", "sum(range(10**13))", "--timeout", "1"}, {.timeout_s = 60});  // a watchdog kill
  REQUIRE(root.nsbox({"resize", id, "--size", "medium"}).exit_code == 0);
  CHECK(root.sh(id, "cat /mnt/files/keep.txt").out == "keep me\n");
  auto info = TestRoot::json(root.nsbox({"inspect", "--json", id}));
  REQUIRE(::kill(info["supervisor_pid"].get<pid_t>(), SIGKILL) == 0);
  for (int i = 0; i < 200 && TestRoot::json(root.nsbox({"inspect", "--json", id}))["status"] != "dead"; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  // Dead sandbox: the files API still works.
  CHECK(root.download(id, "keep.txt") == "keep me\n");
  upload(root, id, local, "after-death.txt");
  CHECK(TestRoot::json(root.nsbox({"files", "--json", id, "ls"}))["entries"].size() >= 3);
  // rm --keep-files: the volume stays, named after the sandbox, and can be attached again.
  REQUIRE(root.nsbox({"rm", id, "--keep-files"}).exit_code == 0);
  auto volumes = TestRoot::json(root.nsbox({"volume", "ls", "--json"}))["volumes"];
  REQUIRE(volumes.size() == 1);
  CHECK(volumes[0]["name"] == id);
  auto again = root.create({"--volume", id});
  CHECK(root.sh(again, "cat /mnt/files/keep.txt /mnt/files/after-death.txt").out == "keep me\nkeep me\n");
  CHECK(root.nsbox({"volume", "rm", id}).exit_code == 1);  // in use
  REQUIRE(root.nsbox({"rm", again}).exit_code == 0);
  CHECK(root.nsbox({"volume", "rm", id}).exit_code == 0);
  // Without --keep-files a sandbox's volume goes with it.
  auto plain = root.create();
  REQUIRE(root.nsbox({"rm", plain}).exit_code == 0);
  CHECK(TestRoot::json(root.nsbox({"volume", "ls", "--json"}))["volumes"].empty());
  CHECK(root.nsbox({"files", plain, "ls"}).exit_code == 1);
}

// Two loop devices on one image would be two filesystems on the same blocks: a second
// attach finds the first's device. The first, of an image never attached (no lock file
// yet), searches no device and marks the lock file, which makes the next one search; so
// do many attaches at once of a new image (whoever made the lock file may take it last).
TEST_CASE("a second attach of an image finds the first's loop device, also when many race for a new one", "[loop-devices]") {
  NSBOX_NEEDS(loop_devices());
  TestRoot root;
  std::string image = root.path() + "/one.img";
  REQUIRE(nsbox::volume_image::create(image, 32ull << 20, 0, 0));
  CHECK_FALSE(nsbox::files::exists(image + ".lock"));
  auto first = nsbox::volume_image::attach(image);
  REQUIRE(first);
  CHECK(nsbox::files::read_file(image + ".lock").value_or("") == "a");  // marked
  auto second = nsbox::volume_image::attach(image);
  REQUIRE(second);
  CHECK(second->device == first->device);
  std::string racing = root.path() + "/raced.img";
  REQUIRE(nsbox::volume_image::create(racing, 32ull << 20, 0, 0));
  std::vector<std::future<nsbox::Result<nsbox::volume_image::Attached>>> attaches;
  for (int i = 0; i < 8; ++i)
    attaches.push_back(std::async(std::launch::async, [&] { return nsbox::volume_image::attach(racing); }));
  std::set<std::string> devices;
  std::vector<nsbox::volume_image::Attached> held;  // open until all are compared
  for (auto& a : attaches) {
    auto got = a.get();
    REQUIRE(got);
    devices.insert(got->device);
    held.push_back(std::move(*got));
  }
  CHECK(devices.size() == 1);
  std::string name = first->device.substr(first->device.rfind('/') + 1);
  CHECK(nsbox::files::read_file("/sys/block/" + name + "/loop/backing_file").value_or("").find("one.img") != std::string::npos);
}

// A format that fails says why, in mkfs's words, and leaves no image behind.
TEST_CASE("an image too small to format is refused with mkfs.ext4's reason, and nothing is left") {
  TestRoot root;
  std::string image = root.path() + "/tiny.img";
  auto made = nsbox::volume_image::create(image, 4096, 0, 0);
  REQUIRE_FALSE(made);
  INFO(made.error().message);
  CHECK(made.error().message.find("mkfs.ext4 " + image + " failed: it exited with status 1: ") != std::string::npos);
  CHECK(made.error().message.find("space") != std::string::npos);  // "Not enough space to build proposed filesystem"
  CHECK(made.error().hint.empty());  // e2fsprogs is there: installing it is not the answer
  CHECK_FALSE(nsbox::files::exists(image));
}

TEST_CASE("a named volume is shared by two running sandboxes", "[zygote]") {
  TestRoot root;
  auto a = root.create({"--volume", "memories"});
  auto b = root.create({"--volume", "memories"});
  REQUIRE(root.sh(a, "mkdir -p /mnt/files/memories && echo 'likes tea' > /mnt/files/memories/memory_summary.md").exit_code == 0);
  CHECK(root.sh(b, "cat /mnt/files/memories/memory_summary.md").out == "likes tea\n");
  REQUIRE(root.nsbox({"exec", b, "-c", "open('/mnt/files/memories/from_b.txt', 'w').write('b was here')"}).exit_code == 0);
  CHECK(root.sh(a, "cat /mnt/files/memories/from_b.txt").out == "b was here");
  CHECK(root.download(a, "memories/from_b.txt") == "b was here");
  REQUIRE(root.nsbox({"rm", a, b}).exit_code == 0);
  auto fresh = root.create({"--volume", "memories"});
  CHECK(root.sh(fresh, "cat /mnt/files/memories/memory_summary.md").out == "likes tea\n");
  REQUIRE(root.nsbox({"rm", fresh}).exit_code == 0);
  CHECK(root.nsbox({"volume", "rm", "memories"}).exit_code == 0);
}

// The files volume is mounted while the sandbox is built (docs/design.md, "Volumes"): a volume that
// cannot be mounted fails the create, saying which image and why, and leaves nothing.
TEST_CASE("a files volume that cannot be mounted fails the create, naming the image") {
  NSBOX_NEEDS(loop_devices());
  TestRoot root;
  auto first = root.create({"--volume", "broken"});
  REQUIRE(root.nsbox({"rm", first}).exit_code == 0);
  const std::string image = root.path() + "/data/volumes/broken.img";
  // No filesystem left in it: 1 MiB of zeros (a new file, so no cache of the old one).
  REQUIRE(::unlink(image.c_str()) == 0);
  {
    nsbox::UniqueFd fd(::open(image.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    REQUIRE(fd);
    REQUIRE(::ftruncate(fd.get(), 1 << 20) == 0);
  }
  auto failed = root.nsbox({"create", "--volume", "broken"});
  CHECK(failed.exit_code != 0);
  INFO(failed.err);
  CHECK(failed.err.find("mount " + image) != std::string::npos);
  CHECK(TestRoot::json(root.nsbox({"ls", "--json", "--all"}))["sandboxes"].empty());
  CHECK(root.nsbox({"volume", "rm", "broken"}).exit_code == 0);
}

TEST_CASE("the files API works while a cell runs", "[zygote]") {
  TestRoot root;
  auto id = root.create();
  ProcessResult cell;
  // The cell says it runs (a marker in /tmp), then waits for the upload, bounded.
  std::thread running([&] {
    cell = root.nsbox({"exec", "--json", id, "-c",
                       "import time, os\nopen('/tmp/cell-running', 'w').close()\n"
                       "for _ in range(1200):\n    if os.path.exists('/mnt/files/go'): break\n    time.sleep(0.05)\n"
                       "open('/mnt/files/go').read()"},
                      {.timeout_s = 120});
  });
  bool started = root.wait_for_file(id, "/tmp/cell-running");
  std::string local = write_local(root, "go", "uploaded while running");
  auto up = root.nsbox({"files", id, "upload", local, "go"});
  running.join();
  REQUIRE(started);
  CHECK(up.exit_code == 0);
  CHECK(TestRoot::json(cell)["results"] == "'uploaded while running'");
}
