// Bucket mounts served by nsbox-bucketfs against a real s3rver, driven from inside real
// sandboxes; what the sandbox wrote is read back with boto3 (Debian's), byte for byte.
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <sstream>
#include <thread>

#include "isolation/sys/files.h"
#include "tests/support/host_features.h"
#include "tests/support/loopback_http.h"
#include "tests/support/nsbox_cli.h"
#include "tests/support/object_store_peers.h"

using namespace nsbox::test;
using nlohmann::json;

namespace {

// s3rver knows one access key and checks no signature: the secret can be anything, so it
// is one that is easy to search for.
constexpr const char* kSecret = "nsbox-test-secret-6d1f0c9a";

std::vector<std::string> credentials_env(const S3rverPeer& s3) { return s3_credentials_env(s3, kSecret); }

std::string create_with(TestRoot& root, const S3rverPeer& s3, const std::vector<std::string>& mounts) {
  std::vector<std::string> args = {"create"};
  for (const auto& m : mounts) args.insert(args.end(), {"--mount", m});
  auto r = root.nsbox(args, {.extra_env = credentials_env(s3)});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::string id = r.out;
  while (!id.empty() && id.back() == '\n') id.pop_back();
  return id;
}


ProcessResult boto_put(const S3rverPeer& s3, const std::string& bucket, const std::string& key, const std::string& body) {
  return s3_boto(s3, "s3.put_object(Bucket='" + bucket + "', Key='" + key + "', Body=sys.stdin.buffer.read())", body);
}

// Many keys at once, 8 PUTs in flight: `keys` is a Python expression for a list of keys;
// each object's body is its key.
void boto_put_keys(const S3rverPeer& s3, const std::string& bucket, const std::string& keys) {
  auto r = s3_boto(s3, "from concurrent.futures import ThreadPoolExecutor\n"
                       "keys = " + keys + "\n"
                       "with ThreadPoolExecutor(8) as pool:\n"
                       "    list(pool.map(lambda k: s3.put_object(Bucket='" + bucket + "', Key=k, Body=k.encode()), keys))");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
}

std::string boto_get(const S3rverPeer& s3, const std::string& bucket, const std::string& key) {
  auto r = s3_boto(s3, "sys.stdout.buffer.write(s3.get_object(Bucket='" + bucket + "', Key='" + key + "')['Body'].read())");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return r.out;
}

// The per-mount options ("ro,nosuid,...") of the FUSE mount under `dir` that process
// `pid` sees (a tool's mount is made in its supervisor's mount namespace), or "".
std::string tool_mount_options(pid_t pid, const std::string& dir) {
  auto text = nsbox::files::read_file("/proc/" + std::to_string(pid) + "/mountinfo", 16 << 20);
  if (!text) return "";
  std::istringstream lines(*text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream f(line);
    std::string id, parent, devno, root, point, options;
    if (f >> id >> parent >> devno >> root >> point >> options && point.rfind(dir, 0) == 0 && line.find(" - fuse") != std::string::npos)
      return options;
  }
  return "";
}

}  // namespace

TEST_CASE("a read-write bucket mount lists, reads, writes, overwrites and deletes, and boto3 sees the same bytes", "[s3]") {
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  S3rverPeer s3({"work"});
  REQUIRE(boto_put(s3, "work", "docs/readme.txt", "from the host\n").exit_code == 0);
  TestRoot root;
  auto id = create_with(root, s3, {"s3://work:/data:rw"});

  auto r = root.sh(id, "ls /data; ls -l /data/docs; cat /data/docs/readme.txt");
  INFO(r.err);
  CHECK(r.out.find("docs\n") == 0);
  CHECK(r.out.find(" user user 14 ") != std::string::npos);  // owned by the sandbox user
  CHECK(r.out.find("from the host\n") != std::string::npos);

  r = root.sh(id, "printf 'written inside\\n' > /data/out.txt && printf 'v2' > /data/docs/readme.txt && mkdir /data/new && "
                  "printf x > /data/new/f && cat /data/out.txt /data/docs/readme.txt");
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out == "written inside\nv2");
  CHECK(boto_get(s3, "work", "out.txt") == "written inside\n");
  CHECK(boto_get(s3, "work", "docs/readme.txt") == "v2");
  CHECK(boto_get(s3, "work", "new/f") == "x");

  r = root.sh(id, "mv /data/out.txt /data/moved.txt && rm /data/new/f && rmdir /data/new && ls /data");
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out == "docs\nmoved.txt\n");
  auto keys = s3_boto(s3, "print(sorted(o['Key'] for o in s3.list_objects_v2(Bucket='work').get('Contents', [])))");
  CHECK(keys.out == "['docs/readme.txt', 'moved.txt']\n");
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}

TEST_CASE("a bucket mount is read-only unless asked: writes get EROFS, reads work, whichever tool serves it", "[s3]") {
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  S3rverPeer s3({"ro"});
  REQUIRE(boto_put(s3, "ro", "a.txt", "A").exit_code == 0);
  TestRoot root;
  std::vector<std::string> strategies = {"builtin"};
  if (mount_tools().present) strategies.insert(strategies.end(), {"rclone", "s3fs"});
  else announce_partial("rclone and s3fs: " + mount_tools().absent_because);
  for (const auto& strategy : strategies) {
    INFO(strategy);
    std::string id;
    if (strategy == "builtin") {
      id = create_with(root, s3, {"s3://ro:/data"});  // no :rw
    } else {
      std::string manifest = root.path() + "/" + strategy + ".json";  // read_only is left out: true by default
      REQUIRE(nsbox::files::atomic_write(manifest, R"([{"type": "s3", "bucket": "ro", "mount_path": "/data", "strategy": ")" +
                                                       strategy + R"("}])"));
      auto created = root.nsbox({"create", "--manifest", manifest}, {.extra_env = credentials_env(s3)});
      INFO(created.err);
      REQUIRE(created.exit_code == 0);
      id = created.out.substr(0, created.out.find('\n'));
    }
    auto r = root.sh(id, "cat /data/a.txt; echo x > /data/b.txt; rm /data/a.txt; mkdir /data/d; true");
    CHECK(r.out == "A");
    CHECK(r.err.find("/data/b.txt: Read-only file system") != std::string::npos);
    CHECK(r.err.find("Read-only file system") != r.err.rfind("Read-only file system"));  // rm and mkdir too
    if (strategy != "builtin") {
      // The sandbox's view is bound read-only whatever the tool does: the tool's own mount,
      // on the host side, must be read-only too (its -o ro, its --read-only).
      auto info = TestRoot::json(root.nsbox({"inspect", "--json", id}));
      pid_t server = info["mount_servers"][0].get<pid_t>();
      auto options = tool_mount_options(server, root.path() + "/run/sandboxes/" + id + "/buckets/");
      INFO("the tool's mount options: " << options);
      REQUIRE_FALSE(options.empty());
      CHECK(options.rfind("ro,", 0) == 0);
    }
    CHECK(root.nsbox({"rm", id}).exit_code == 0);
  }
  CHECK(boto_get(s3, "ro", "a.txt") == "A");
}

TEST_CASE("a prefix confines the mount: keys outside it are out of sight and out of reach", "[s3]") {
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  S3rverPeer s3({"shared"});
  REQUIRE(boto_put(s3, "shared", "agents/a1/notes.md", "mine").exit_code == 0);
  REQUIRE(boto_put(s3, "shared", "agents/a2/notes.md", "theirs").exit_code == 0);
  REQUIRE(boto_put(s3, "shared", "top.txt", "top").exit_code == 0);
  TestRoot root;
  auto id = create_with(root, s3, {"s3://shared/agents/a1:/data:rw"});
  auto r = root.sh(id, "ls -a /data; cat /data/notes.md; cat /data/../a2/notes.md 2>&1; echo new > /data/new.md");
  CHECK(r.out.find(".\n..\nnotes.md\nmine") == 0);
  CHECK(r.out.find("theirs") == std::string::npos);
  CHECK(boto_get(s3, "shared", "agents/a1/new.md") == "new\n");
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}

TEST_CASE("a 200 MiB file goes up in parts and comes back byte for byte, and many small files list and read", "[s3]") {
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  S3rverPeer s3({"big"});
  std::string small_puts = "for i in range(200): s3.put_object(Bucket='big', Key=f'small/f{i:03}.txt', Body=f'file {i}\\n'.encode())";
  REQUIRE(s3_boto(s3, small_puts).exit_code == 0);
  TestRoot root;
  auto id = create_with(root, s3, {"s3://big:/data:rw"});
  auto r = root.sh(id, "head -c 200M /dev/urandom > /data/blob.bin && sha256sum < /data/blob.bin && ls -l /data/blob.bin",
                   {}, {.timeout_s = 240});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::string inside_sum = r.out.substr(0, 64);
  CHECK(r.out.find(" 209715200 ") != std::string::npos);
  auto host = s3_boto(s3, "b = s3.get_object(Bucket='big', Key='blob.bin')['Body'].read(); print(len(b), hashlib.sha256(b).hexdigest())");
  CHECK(host.out == "209715200 " + inside_sum + "\n");

  r = root.sh(id, "ls /data/small | wc -l; cat /data/small/* | wc -l; cat /data/small/f123.txt");
  CHECK(r.out == "200\n200\nfile 123\n");
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}

TEST_CASE("two fresh sandboxes mounting the same prefix: what the first writes, the second reads", "[s3]") {
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  S3rverPeer s3({"memory"});
  TestRoot root;
  auto first = create_with(root, s3, {"s3://memory/agent-7:/home/user/memories:rw"});
  REQUIRE(root.sh(first, "echo '# what I learned' > ~/memories/memory_summary.md").exit_code == 0);
  CHECK(root.nsbox({"rm", first}).exit_code == 0);
  auto second = create_with(root, s3, {"s3://memory/agent-7:memories"});
  CHECK(root.sh(second, "cat ~/memories/memory_summary.md").out == "# what I learned\n");
  CHECK(root.nsbox({"rm", second}).exit_code == 0);
}

TEST_CASE("the secret is nowhere the sandbox can look, nor in inspect, the state file or the log", "[s3]") {
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  S3rverPeer s3({"sec"});
  TestRoot root;
  auto id = create_with(root, s3, {"s3://sec:/data:rw"});
  // /usr is the host's own, read-only and untouched by nsbox; everything else is searched.
  // The pattern is the secret with its last character in brackets: it matches the secret
  // and not itself, so the searching commands' own command lines do not count.
  std::string pattern = std::string(kSecret, std::strlen(kSecret) - 1) + "[" + kSecret[std::strlen(kSecret) - 1] + "]";
  auto r = root.sh(id, "cat /proc/*/environ /proc/*/cmdline 2>/dev/null | grep -ac '" + pattern + "'; grep -rls '" + pattern +
                           "' / --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr --exclude-dir=data; echo done",
                   {}, {.timeout_s = 240});
  CHECK(r.out == "0\ndone\n");
  auto inspect = root.nsbox({"inspect", "--json", id});
  CHECK(inspect.out.find(kSecret) == std::string::npos);
  CHECK(inspect.out.find("\"mount_path\": \"/data\"") != std::string::npos);
  std::string dir = root.path() + "/run/sandboxes/" + id;
  CHECK(nsbox::files::read_file(dir + "/state.json")->find(kSecret) == std::string::npos);
  CHECK(root.logs(id).find(kSecret) == std::string::npos);
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}

TEST_CASE("a mount that cannot be set up fails create with the mount and the remote's answer, and leaves nothing", "[s3]") {
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  S3rverPeer s3({"exists"});
  TestRoot root;
  auto missing = root.nsbox({"create", "--mount", "s3://nosuch:/data"}, {.extra_env = credentials_env(s3)});
  CHECK(missing.exit_code != 0);
  CHECK(missing.err.find("mount s3://nosuch/ at /data") != std::string::npos);
  CHECK(missing.err.find("404 NoSuchBucket") != std::string::npos);

  auto env = credentials_env(s3);
  env[0] = "AWS_ACCESS_KEY_ID=NOT-A-KEY";
  auto bad_key = root.nsbox({"create", "--mount", "s3://exists:/data"}, {.extra_env = env});
  CHECK(bad_key.exit_code != 0);
  CHECK(bad_key.err.find("403 InvalidAccessKeyId") != std::string::npos);
  CHECK(bad_key.err.find(kSecret) == std::string::npos);
  CHECK(TestRoot::json(root.nsbox({"ls", "--json"}))["sandboxes"].empty());
}

TEST_CASE("the endpoint dying mid-read gives EIO in bounded time, not a hung reader", "[s3]") {
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  S3rverPeer s3({"flaky"});
  REQUIRE(s3_boto(s3, "s3.put_object(Bucket='flaky', Key='big.bin', Body=b'x' * (48 << 20))").exit_code == 0);
  TestRoot root;
  auto id = create_with(root, s3, {"s3://flaky:/data"});
  // The reader says when it has its first MiB, then waits for a line on stdin before it
  // reads on: the store dies in between.
  auto reader = root.start({"sh", id, "--",
                            "python3 -c \"import sys\nf = open('/data/big.bin', 'rb')\nf.read(1 << 20)\nprint('read a MiB', flush=True)\n"
                            "sys.stdin.readline()\ntry:\n  f.read()\n  print('read all')\nexcept OSError as e:\n  print('errno', e.errno)\""},
                           {.stdin_is_null = false, .timeout_s = 150});
  REQUIRE(reader->wait_for_output("read a MiB"));
  s3.kill_now();
  reader->write_stdin("go on\n");
  auto r = reader->wait();  // 150 s: a bound on a hang, no more
  INFO(r.err);
  CHECK_FALSE(r.timed_out);
  CHECK(r.out == "read a MiB\nerrno 5\n");  // EIO
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}

TEST_CASE("a killed FUSE server gives ENOTCONN inside, and rm still cleans everything", "[s3]") {
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  S3rverPeer s3({"gone"});
  TestRoot root;
  auto id = create_with(root, s3, {"s3://gone:/data:rw"});
  auto info = TestRoot::json(root.nsbox({"inspect", "--json", id}));
  REQUIRE(info["mount_servers"].size() == 1);
  pid_t server = info["mount_servers"][0].get<pid_t>();
  REQUIRE(::kill(server, SIGKILL) == 0);
  // Gone, not dying: a request that reaches the connection before its abort gets
  // ECONNABORTED; the ones after it, ENOTCONN. /proc/PID goes when the supervisor reaps the
  // server, after its last thread (its leader shows as a zombie before that).
  auto gone = [&] { return !nsbox::files::exists("/proc/" + std::to_string(server)); };
  for (int i = 0; i < 500 && !gone(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(gone());
  auto r = root.sh(id, "ls /data");
  INFO(r.err);
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("Transport endpoint is not connected") != std::string::npos);
  // Reaped at once, and said in the sandbox's log.
  std::string log;
  for (int i = 0; i < 100 && log.find("was killed by signal 9") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    log = nsbox::files::read_file(root.path() + "/run/sandboxes/" + id + "/supervisor.log").value_or("");
  }
  CHECK(log.find("the server of mount s3://gone/ at /data (read-write) was killed by signal 9") != std::string::npos);
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
  CHECK_FALSE(nsbox::files::exists(root.path() + "/run/sandboxes/" + id));
}

TEST_CASE("the rclone and s3fs strategies serve the same mount, with the secret in no command line", "[s3]") {
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  NSBOX_NEEDS(mount_tools());
  S3rverPeer s3({"tools"});
  REQUIRE(boto_put(s3, "tools", "in/hello.txt", "hello").exit_code == 0);
  TestRoot root;
  for (std::string tool : {"rclone", "s3fs"}) {
    INFO(tool);
    std::string manifest = root.path() + "/" + tool + ".json";
    REQUIRE(nsbox::files::atomic_write(manifest, R"([{"type": "s3", "bucket": "tools", "mount_path": "/data", "read_only": false,
                                                     "strategy": ")" + tool + R"("}])"));
    auto created = root.nsbox({"create", "--manifest", manifest}, {.extra_env = credentials_env(s3)});
    INFO(created.err);
    REQUIRE(created.exit_code == 0);
    std::string id = created.out.substr(0, created.out.find('\n'));
    auto r = root.sh(id, "cat /data/in/hello.txt && echo ' from " + tool + "' > /data/" + tool + ".txt && ls /data");
    INFO(r.err);
    CHECK(r.out.rfind("hello", 0) == 0);
    CHECK(r.out.find(tool + ".txt\n") != std::string::npos);
    CHECK(r.out.find("in\n") != std::string::npos);
    // rclone's close() returns before its upload is done: wait for it, bounded.
    std::string got;
    for (int i = 0; i < 100 && got.empty(); ++i) {
      auto g = s3_boto(s3, "print(s3.get_object(Bucket='tools', Key='" + tool + ".txt')['Body'].read().decode(), end='')");
      if (g.exit_code == 0) got = g.out;
      else std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    CHECK(got == " from " + tool + "\n");
    auto info = TestRoot::json(root.nsbox({"inspect", "--json", id}));
    pid_t server = info["mount_servers"][0].get<pid_t>();
    auto cmdline = nsbox::files::read_file("/proc/" + std::to_string(server) + "/cmdline");
    REQUIRE(cmdline);
    CHECK(cmdline->find(tool) != std::string::npos);
    CHECK(cmdline->find(kSecret) == std::string::npos);
    auto environ = nsbox::files::read_file("/proc/" + std::to_string(server) + "/environ");
    CHECK(environ->find(kSecret) == std::string::npos);
    CHECK(environ->find("AWS_CA_BUNDLE") == std::string::npos);
    CHECK(nsbox::files::list_dir(root.path() + "/run/sandboxes/" + id + "/buckets")->size() == 2);  // the mount point and its log: no secret file
    CHECK(root.nsbox({"rm", id}).exit_code == 0);
  }
}

TEST_CASE("a mount tool that is not installed fails create with the package to install", "[s3]") {
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  S3rverPeer s3({"notool"});
  TestRoot root;
  auto env = credentials_env(s3);
  env.push_back("PATH=/nonexistent-nsbox-test-dir");
  std::string manifest = root.path() + "/m.json";
  REQUIRE(nsbox::files::atomic_write(manifest, R"([{"type": "s3", "bucket": "notool", "mount_path": "/data", "strategy": "rclone"}])"));
  auto r = root.nsbox({"create", "--manifest", manifest}, {.extra_env = env});
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("mount s3://notool/ at /data (read-only): mount tool missing: rclone is not installed") != std::string::npos);
  CHECK(r.err.find("apt-get install rclone") != std::string::npos);
  CHECK(TestRoot::json(root.nsbox({"ls", "--json"}))["sandboxes"].empty());
}

TEST_CASE("writes through a bucket mount get ENOSPC before the host disk they are staged on fills", "[s3]") {
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  S3rverPeer s3({"fill"});
  TestRoot root;
  SmallDisk disk(root, "1536m");  // the host's disk the writes are staged on
  auto nsbox = [&](const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
    return disk.nsbox(args, env);
  };
  auto created = nsbox({"create", "--files-quota", "64M", "--mount", "s3://fill:/data:rw"}, credentials_env(s3));
  INFO(created.err);
  REQUIRE(created.exit_code == 0);
  std::string id = created.out.substr(0, created.out.find('\n'));
  auto r = nsbox({"sh", id, "--", "head -c 1200M /dev/zero > /data/big.bin; echo $?"});
  CHECK(r.out == "1\n");
  CHECK(r.err.find("No space left on device") != std::string::npos);
  struct statvfs st{};
  REQUIRE(::statvfs(disk.path().c_str(), &st) == 0);
  CHECK(static_cast<uint64_t>(st.f_bavail) * st.f_frsize >= (512ull << 20));  // the reserve stayed free
}

TEST_CASE("a shell redirect uploads once, with its content, and a touched new file arrives empty", "[s3]") {
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  S3rverPeer s3({"once"});
  TestRoot root;
  auto id = create_with(root, s3, {"s3://once:/data:rw"});
  // `> f` opens, dups the fd and closes the first one before writing: that close must not
  // upload an empty file.
  // A touched file is listed at once, here, though its upload comes at its last close.
  auto listed = root.sh(id, "echo hello > /data/f.txt && touch /data/empty && ls /data");
  REQUIRE(listed.exit_code == 0);
  CHECK(listed.out == "empty\nf.txt\n");
  auto puts_of = [&](const std::string& key) {
    std::string log = s3.log(), needle = "Stored object \"" + key + "\"";
    size_t count = 0;
    for (size_t at = log.find(needle); at != std::string::npos; at = log.find(needle, at + 1)) ++count;
    return count;
  };
  CHECK(puts_of("f.txt") == 1);
  CHECK(boto_get(s3, "once", "f.txt") == "hello\n");
  // An empty new file goes up when its last descriptor closes, just after close() returns.
  ProcessResult empty;
  for (int i = 0; i < 50; ++i) {
    empty = s3_boto(s3, "print(s3.head_object(Bucket='once', Key='empty')['ContentLength'])");
    if (empty.exit_code == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(empty.out == "0\n");
  CHECK(puts_of("empty") == 1);
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}

TEST_CASE("an upload that fails at close is the writer's EIO, not a silent loss", "[s3]") {
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  S3rverPeer s3({"lost"});
  TestRoot root;
  auto id = create_with(root, s3, {"s3://lost:/data:rw"});
  // The writer says when its data is written, then waits for a line on stdin before it
  // closes: the store dies in between.
  auto writer = root.start({"sh", id, "--",
                            "python3 -c \"import sys\nf = open('/data/report.csv', 'w')\nf.write('a,b\\\\n' * 1000)\n"
                            "print('written', flush=True)\nsys.stdin.readline()\n"
                            "try:\n  f.close()\n  print('closed')\nexcept OSError as e:\n  print('errno', e.errno)\""},
                           {.stdin_is_null = false, .timeout_s = 150});
  REQUIRE(writer->wait_for_output("written"));
  s3.kill_now();
  writer->write_stdin("close it\n");
  auto r = writer->wait();
  INFO(r.err);
  CHECK_FALSE(r.timed_out);
  CHECK(r.out == "written\nerrno 5\n");
  CHECK(root.logs(id).find("upload s3://lost/report.csv") != std::string::npos);  // the log says what failed
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}

TEST_CASE("fsync uploads what was written, and says so when the upload fails", "[s3]") {
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  S3rverPeer s3({"sync"});
  TestRoot root;
  auto id = create_with(root, s3, {"s3://sync:/data:rw"});
  // Two files open at once: the first fsync'ed while the store is up, the second after it
  // died. Each step waits for a line on stdin.
  auto writer = root.start({"sh", id, "--",
                            "python3 -c \"import os, sys\n"
                            "def fsync(f):\n  try:\n    os.fsync(f.fileno())\n    return 'ok'\n  except OSError as e:\n    return 'errno %d' % e.errno\n"
                            "kept = open('/data/kept.txt', 'w')\nkept.write('kept\\\\n')\nkept.flush()\n"
                            "print('fsync kept:', fsync(kept), flush=True)\nsys.stdin.readline()\n"
                            "lost = open('/data/lost.txt', 'w')\nlost.write('lost\\\\n')\nlost.flush()\n"
                            "print('written lost', flush=True)\nsys.stdin.readline()\n"
                            "print('fsync lost:', fsync(lost), flush=True)\n"
                            "for f in (kept, lost):\n  try:\n    f.close()\n  except OSError:\n    pass\""},
                           {.stdin_is_null = false, .timeout_s = 150});
  REQUIRE(writer->wait_for_output("fsync kept:"));
  // Still open, and already in the bucket: fsync uploaded it.
  CHECK(boto_get(s3, "sync", "kept.txt") == "kept\n");
  writer->write_stdin("next\n");
  REQUIRE(writer->wait_for_output("written lost"));
  s3.kill_now();
  writer->write_stdin("fsync it\n");
  auto r = writer->wait();
  INFO(r.err);
  CHECK_FALSE(r.timed_out);
  CHECK(r.out == "fsync kept: ok\nwritten lost\nfsync lost: errno 5\n");  // EIO: not a silent loss
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}

TEST_CASE("a public bucket mounts without credentials, and a virtual-host endpoint serves a mount", "[s3]") {
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  S3rverPeer s3({"open", "vhost"}, "localhost");
  REQUIRE(boto_put(s3, "open", "readme.txt", "public\n").exit_code == 0);
  TestRoot root;
  // No AWS_* at all: anonymous requests, which s3rver accepts like a public bucket.
  auto anonymous = root.nsbox({"create", "--mount", "s3://open:/data"}, {.extra_env = {"S3_ENDPOINT_URL=" + s3.endpoint(),
                                                                                      "AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY="}});
  INFO(anonymous.err);
  REQUIRE(anonymous.exit_code == 0);
  std::string id = anonymous.out.substr(0, anonymous.out.find('\n'));
  CHECK(root.sh(id, "cat /data/readme.txt").out == "public\n");
  CHECK(root.nsbox({"rm", id}).exit_code == 0);

  // What goes on the wire (the Host, the path) is checked in tests/unit/s3_addressing_test.cc.
  std::string manifest = root.path() + "/vhost.json";
  REQUIRE(nsbox::files::atomic_write(manifest, R"([{"type": "s3", "bucket": "vhost", "mount_path": "/data", "read_only": false,
      "path_style": false, "endpoint_url": "http://s3.localhost:)" + std::to_string(s3.port()) + R"("}])"));
  auto created = root.nsbox({"create", "--manifest", manifest}, {.extra_env = credentials_env(s3)});
  INFO(created.err);
  REQUIRE(created.exit_code == 0);
  id = created.out.substr(0, created.out.find('\n'));
  CHECK(root.sh(id, "echo by-host > /data/v.txt && cat /data/v.txt").out == "by-host\n");
  CHECK(boto_get(s3, "vhost", "v.txt") == "by-host\n");
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}

TEST_CASE("an endpoint that does not answer fails create with the mount and the connection error", "[s3]") {
  RefusingPort port;  // ours for the test, and closed: nobody else can be listening there
  TestRoot root;
  std::string endpoint = "http://127.0.0.1:" + std::to_string(port.port());
  auto r = root.nsbox({"create", "--mount", "s3://any:/data"},
                      {.extra_env = {"S3_ENDPOINT_URL=" + endpoint, "AWS_ACCESS_KEY_ID=AKID", std::string("AWS_SECRET_ACCESS_KEY=") + kSecret}});
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("mount s3://any/ at /data (read-only): list s3://any/: GET " + endpoint + "/any/: Couldn't connect to server") !=
        std::string::npos);
  CHECK(r.err.find(kSecret) == std::string::npos);
  CHECK(TestRoot::json(root.nsbox({"ls", "--json"}))["sandboxes"].empty());
}

TEST_CASE("renames, appends, rmdir and unlink keep the bucket and the files in step", "[s3]") {
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  S3rverPeer s3({"step"});
  TestRoot root;
  auto id = create_with(root, s3, {"s3://step:/data:rw"});
  auto keys = [&] {
    return s3_boto(s3, "print(sorted(o['Key'] for o in s3.list_objects_v2(Bucket='step').get('Contents', [])))").out;
  };

  // A moved file reads at its new name at once (the kernel keeps the inode it knew).
  auto r = root.sh(id, "echo moved > /data/a && mv /data/a /data/b && cat /data/b");
  INFO(r.err);
  CHECK(r.out == "moved\n");

  // A file renamed while open for writing: its next upload goes to the new name only.
  r = root.sh(id, "python3 -c \"import os\nf = open('/data/w', 'w')\nf.write('1')\nf.flush()\nos.fsync(f.fileno())\n"
                  "os.rename('/data/w', '/data/w2')\nf.write('2')\nf.close()\"");
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(boto_get(s3, "step", "w2") == "12");

  // Appends through one descriptor, with a listing in between, keep what came before.
  r = root.sh(id, "exec 3>>/data/log; echo a >&3; sleep 1.5; ls -l /data >/dev/null; echo b >&3; exec 3>&-; cat /data/log");
  CHECK(r.out == "a\nb\n");

  // rmdir of a directory with a marker and a file in it is ENOTEMPTY, and loses nothing.
  r = root.sh(id, "mkdir /data/d && echo x > /data/d/f && rmdir /data/d; ls /data/d");
  CHECK(r.err.find("Directory not empty") != std::string::npos);
  CHECK(r.out == "f\n");

  // A file unlinked while open for writing does not come back at its close.
  r = root.sh(id, "python3 -c \"import os\nf = open('/data/tmp', 'w')\nos.unlink('/data/tmp')\nf.write('x')\nf.close()\"");
  CHECK(r.exit_code == 0);

  // Names S3 listings could not carry back are refused.
  r = root.sh(id, "touch $'/data/bad\\x01name'");
  INFO(r.err);
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("Invalid argument") != std::string::npos);

  CHECK(keys() == "['b', 'd/', 'd/f', 'log', 'w2']\n");
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}

TEST_CASE("a directory of several listing pages lists every name once, for ls, ls -l, find and a rewind", "[s3]") {
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  S3rverPeer s3({"pages"});
  // 2,345 files and 3 subdirectories: three pages of 1,000 (s3rver pages like S3).
  boto_put_keys(s3, "pages", "[f'many/k{i:05}' for i in range(2345)] + [f'many/sub{j}/x' for j in range(3)]");
  TestRoot root;
  auto id = create_with(root, s3, {"s3://pages:/data"});
  auto r = root.sh(id,
                   "ls /data/many | wc -l; ls /data/many | sort -u | wc -l; ls -l /data/many | grep -c '^-'; "
                   "find /data/many -type d | wc -l; cat /data/many/k01234",
                   {}, {.timeout_s = 120});
  INFO(r.err);
  CHECK(r.out == "2348\n2348\n2345\n4\nmany/k01234");
  // One open directory read twice, from the start (a rewinddir): the same names.
  auto twice = root.sh(id,
                       "python3 -c \"import os\n"
                       "fd = os.open('/data/many', os.O_RDONLY)\n"
                       "a = sorted(os.listdir(fd)); b = sorted(os.listdir(fd))\n"
                       "print(len(a), a == b)\"");
  INFO(twice.err);
  CHECK(twice.out == "2348 True\n");
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}

TEST_CASE("a listing read while the directory changes is not taken for lookups, and a rewind lists anew", "[s3]") {
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  S3rverPeer s3({"churn"});
  boto_put_keys(s3, "churn", "[f'big/k{i:05}' for i in range(1500)] + ['small/a']");
  TestRoot root;
  auto id = create_with(root, s3, {"s3://churn:/data:rw"});
  // A file deleted while its directory (two pages) is being listed is gone at once: the
  // listing, read to its end just after, is not cached with it.
  auto churn = root.sh(id,
                       "python3 -c \"import os\n"
                       "names = []\n"
                       "for e in os.scandir('/data/big'):\n"
                       "    if not names: os.unlink(e.path)\n"
                       "    names.append(e.name)\n"
                       "print(len(names), os.path.exists('/data/big/' + names[0]), os.path.exists('/data/big/' + names[1]))\"",
                       {}, {.timeout_s = 120});
  INFO(churn.err);
  CHECK(churn.out == "1500 False True\n");
  // One open directory of one page, read, then rewound after a file was added: the new
  // file shows (a rewind lists anew; the first listing is not served again).
  auto rewound = root.sh(id,
                         "python3 -c \"import os\n"
                         "fd = os.open('/data/small', os.O_RDONLY)\n"
                         "before = sorted(os.listdir(fd))\n"
                         "open('/data/small/b', 'w').write('new')\n"
                         "print(before, sorted(os.listdir(fd)))\"");
  INFO(rewound.err);
  CHECK(rewound.out == "['a'] ['a', 'b']\n");
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}
