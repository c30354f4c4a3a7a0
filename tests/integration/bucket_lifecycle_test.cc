// The life of a sandbox's bucket mounts around it: `nsbox rm` stays fast and leaves nothing
// when a sandbox process is stuck on a stalled remote, when its supervisor was killed, and
// whichever tool serves the mount; credentials stay out of every host process's
// environment. Against a real s3rver. And what the servers' HTTP client does with a
// remote that answers more, or elsewhere, than asked (a loopback server).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <regex>
#include <sstream>
#include <thread>

#include "isolation/sys/files.h"
#include "mounts/bucket/remote_reply.h"
#include "mounts/http/client.h"
#include "tests/support/host_features.h"
#include "tests/support/loopback_http.h"
#include "tests/support/nsbox_cli.h"
#include "tests/support/object_store_peers.h"

using namespace nsbox::test;
using nlohmann::json;

namespace {

// s3rver checks no signature: the secret can be anything, so it is one easy to search for.
constexpr const char* kSecret = "nsbox-lifecycle-secret-41b7e2";

std::vector<std::string> credentials_env(const S3rverPeer& s3) { return s3_credentials_env(s3, kSecret); }

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// A sandbox with the mounts of `manifest` (a JSON list), its id.
std::string create_with_manifest(TestRoot& root, const S3rverPeer& s3, const std::string& manifest) {
  std::string path = root.path() + "/manifest.json";
  REQUIRE(nsbox::files::atomic_write(path, manifest));
  auto created = root.nsbox({"create", "--manifest", path}, {.extra_env = credentials_env(s3)});
  INFO(created.err);
  REQUIRE(created.exit_code == 0);
  return first_line(created.out);
}

bool process_gone(pid_t pid) {
  auto stat = nsbox::files::read_file("/proc/" + std::to_string(pid) + "/stat");
  return !stat || stat->find(") Z ") != std::string::npos;
}

bool wait_gone(pid_t pid, std::chrono::milliseconds bound) {
  auto deadline = std::chrono::steady_clock::now() + bound;
  while (!process_gone(pid) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return process_gone(pid);
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// What of a sandbox's mount caches is left under <data>/staging.
std::vector<std::string> staging_leftovers(const TestRoot& root, const std::string& id) {
  std::vector<std::string> left;
  for (const auto& name : nsbox::files::list_dir(root.path() + "/data/staging").value_or(std::vector<std::string>{}))
    if (name.rfind(id + "-", 0) == 0) left.push_back(name);
  return left;
}

// The pids in a cgroup directory (cgroup.procs).
std::vector<pid_t> cgroup_pids(const std::string& dir) {
  std::vector<pid_t> pids;
  std::istringstream text(nsbox::files::read_file(dir + "/cgroup.procs").value_or(""));
  for (pid_t p; text >> p;) pids.push_back(p);
  return pids;
}

// Whether process `pid` is a `cat` waiting in the kernel for a FUSE answer: its wait
// channel names FUSE's wait (or, where the kernel hides wait channels, it sleeps
// uninterruptibly).
bool cat_waiting_on_fuse(pid_t pid) {
  std::string proc = "/proc/" + std::to_string(pid);
  auto stat = nsbox::files::read_file(proc + "/stat");
  if (!stat) return false;
  auto open = stat->find('('), close = stat->rfind(')');
  if (open == std::string::npos || close == std::string::npos || close + 2 >= stat->size()) return false;
  if (stat->substr(open + 1, close - open - 1) != "cat") return false;
  std::string wchan = nsbox::files::read_file(proc + "/wchan").value_or("");
  return wchan.find("fuse") != std::string::npos || wchan.find("request_wait_answer") != std::string::npos ||
         (*stat)[close + 2] == 'D';
}

// SIGSTOPs a peer for a scope; it runs again before the peer is stopped.
struct Frozen {
  explicit Frozen(pid_t pid) : pid(pid) { REQUIRE(::kill(pid, SIGSTOP) == 0); }
  ~Frozen() { ::kill(pid, SIGCONT); }
  pid_t pid;
};


}  // namespace

TEST_CASE("a server that ignores Range: the read stops once the buffer is full, not at the object's end", "[s3]") {
  // 64 MiB announced, 2 MiB sent, then nothing: reading on would wait for the stall bound
  // and fail, or take the whole object from a server that sends it.
  LoopbackHttpServer server("HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(64 << 20) + "\r\n\r\n" +
                                std::string(2 << 20, 'x'),
                            true);
  nsbox::http::Client client;
  std::string buffer(1 << 20, '\0');
  nsbox::http::Request request;
  request.url = server.url("/b/k");
  request.headers = {{"Range", "bytes=0-1048575"}};
  request.sink = buffer.data();
  request.sink_capacity = buffer.size();
  // A client that read on would meet the held connection's silence and fail at the stall
  // bound: success here is the proof that it stopped.
  auto response = client.perform(request);
  REQUIRE(response);
  CHECK(response->status == 200);
  CHECK(response->sunk == buffer.size());
  CHECK(buffer == std::string(1 << 20, 'x'));
  for (int i = 0; i < 100 && !server.client_closed(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(server.client_closed());  // the rest of the body is not read: the connection goes
}

TEST_CASE("a stopped HTTP client cuts its transfers short and starts none but clean-ups", "[s3]") {
  // A server that answers nothing: without stop() the transfer would wait out the 10 s stall bound.
  LoopbackHttpServer silent("", true);
  nsbox::http::Client client(nsbox::bucket::store_client_options({}));
  nsbox::http::Request request;
  request.url = silent.url("/b/k");
  nsbox::Result<nsbox::http::Response> cut = nsbox::fail(nsbox::make_error(nsbox::ErrorCode::kInternal, "not run"));
  std::jthread transfer([&] { cut = client.perform(request); });
  for (int i = 0; i < 250 && silent.connections() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE(silent.connections() == 1);
  client.stop();
  transfer.join();  // within about a second: curl reports progress once a second
  REQUIRE_FALSE(cut);
  CHECK(cut.error().sys_errno == ECANCELED);
  CHECK(cut.error().message.find("the mount is stopping") != std::string::npos);

  auto refused = client.perform(request);  // a new request fails at once, without connecting
  REQUIRE_FALSE(refused);
  CHECK(refused.error().sys_errno == ECANCELED);
  CHECK(silent.connections() == 1);

  LoopbackHttpServer store(http_ok("gone"));
  request.url = store.url("/b/k?uploadId=1");
  request.method = "DELETE";
  request.cleanup = true;  // an abort still goes
  auto aborted = client.perform(request);
  REQUIRE(aborted);
  CHECK(aborted->status == 200);
  CHECK(store.requests().size() == 1);
}

TEST_CASE("the servers' HTTP client follows no redirect and speaks nothing but http and https", "[s3]") {
  LoopbackHttpServer server("HTTP/1.1 307 Temporary Redirect\r\nLocation: file:///etc/passwd\r\nContent-Length: 0\r\n\r\n",
                            true);
  nsbox::http::Client client;
  nsbox::http::Request request;
  request.url = server.url("/b/k");
  auto response = client.perform(request);
  REQUIRE(response);
  CHECK(response->status == 307);  // the answer, for the caller to report; not followed
  CHECK(server.connections() == 1);

  for (const char* url : {"file:///etc/passwd", "ftp://127.0.0.1/x", "gopher://127.0.0.1/x"}) {
    INFO(url);
    request.url = url;
    auto refused = client.perform(request);
    REQUIRE_FALSE(refused);
    CHECK(refused.error().message.find("nsupported protocol") != std::string::npos);
  }
}

TEST_CASE("bucket servers reach the store through the nsbox command's proxy, and the sandbox sees none of it", "[s3]") {
  NSBOX_NEEDS(fuse_device());
  // A store whose name does not resolve: only the proxy can reach it. The proxy answers
  // every request with an empty listing.
  LoopbackHttpServer proxy(http_ok(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
      "<Name>proxied</Name><KeyCount>0</KeyCount><IsTruncated>false</IsTruncated></ListBucketResult>"));
  TestRoot root;
  auto created = root.nsbox({"create", "--mount", "s3://proxied:/data"},
                            {.extra_env = {"AWS_ACCESS_KEY_ID=S3RVER", std::string("AWS_SECRET_ACCESS_KEY=") + kSecret,
                                           "S3_ENDPOINT_URL=http://store.nsbox-test.invalid:9000", "AWS_REGION=us-east-1",
                                           "http_proxy=" + proxy.url(""), "no_proxy=", "NO_PROXY="}});
  INFO(created.err);
  REQUIRE(created.exit_code == 0);
  std::string id = first_line(created.out);
  CHECK(root.sh(id, "ls -A /data | wc -l").out == "0\n");
  auto requests = proxy.requests();
  REQUIRE_FALSE(requests.empty());
  for (const auto& head : requests) {
    INFO(head);
    CHECK(head.find(" http://store.nsbox-test.invalid:9000/proxied") != std::string::npos);  // absolute form: via the proxy
  }
  // The shell's environment, and every process's the sandbox user can read (not init's:
  // it is not dumpable).
  auto env = root.sh(id, "env; for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; done 2>/dev/null; true");
  CHECK(env.exit_code == 0);
  CHECK(env.out.find("PATH=") != std::string::npos);
  CHECK(env.out.find("proxy") == std::string::npos);
  CHECK(env.out.find(std::to_string(proxy.port())) == std::string::npos);
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}

TEST_CASE("a sandbox removed during an upload in parts: the transfer is cut short and the upload aborted", "[s3]") {
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  S3rverPeer s3({"cut"});
  TestRoot root;
  std::string id = create_with_manifest(root, s3, R"([{"type": "s3", "bucket": "cut", "mount_path": "/data", "read_only": false}])");
  // 1 GiB goes up at the close in 128 parts of 8 MiB: seconds against s3rver.
  std::jthread writer([&] { (void)root.sh(id, "head -c 1G /dev/zero > /data/big.bin", {}, {.timeout_s = 150}); });
  // s3rver logs each answer as "info: <key and query> STATUS TIME SIZE".
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (occurrences(s3.log(), "partNumber=") == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE(occurrences(s3.log(), "partNumber=") > 0);
  auto removed = root.nsbox({"rm", id});
  CHECK(removed.exit_code == 0);
  writer.join();
  std::string log = s3.log();
  INFO(log.substr(log.size() > 3000 ? log.size() - 3000 : 0));
  CHECK(occurrences(log, "partNumber=") < 128);  // cut short, not sent to the end
  // The abort was sent: a DELETE of the upload, which s3rver does not implement (405; a
  // real store removes the parts). No Complete (a POST, answered 200) came.
  CHECK(std::regex_search(log, std::regex(R"(big\.bin\?uploadId=[0-9a-f]+ 405 )")));
  CHECK_FALSE(std::regex_search(log, std::regex(R"(big\.bin\?uploadId=[0-9a-f]+ 200 )")));
  CHECK(s3_boto(s3, "import botocore\ntry:\n  s3.head_object(Bucket='cut', Key='big.bin')\nexcept botocore.exceptions.ClientError:\n  sys.exit(7)")
            .exit_code == 7);
}

TEST_CASE("a sandbox process stuck on a stalled bucket does not hold up rm, it is quick and the cgroup goes", "[s3]") {
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  NSBOX_NEEDS(cgroup_limits());
  S3rverPeer s3({"stalled"});
  REQUIRE(s3_boto(s3, "s3.put_object(Bucket='stalled', Key='big.bin', Body=b'x' * (64 << 20))").exit_code == 0);
  TestRoot root;
  std::string id = create_with_manifest(root, s3, R"([{"type": "s3", "bucket": "stalled", "mount_path": "/data"}])");
  auto info = TestRoot::json(root.nsbox({"inspect", "--json", id}));
  std::vector<std::string> cgroups = info["cgroup"]["dirs"].get<std::vector<std::string>>();
  pid_t server = info["mount_servers"][0].get<pid_t>();
  pid_t supervisor = info["supervisor_pid"].get<pid_t>();

  ProcessResult reader;
  {
    Frozen frozen(s3.pid());
    // The read waits on the remote inside a FUSE request, in the kernel, where SIGKILL
    // does not reach it: only an answer or the end of the FUSE connection frees it.
    std::jthread t([&] { reader = root.sh(id, "cat /data/big.bin | wc -c", {}, {.timeout_s = 150}); });
    // rm once the reader is stuck there.
    bool stuck = false;
    for (int i = 0; i < 3000 && !stuck; ++i) {
      stuck = std::ranges::any_of(cgroup_pids(cgroups.front()), cat_waiting_on_fuse);
      if (!stuck) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    // 60 s bounds a hang; a stuck reader must not hold rm up at all, the reader freed by it
    // while the store is still frozen says so.
    auto rm = root.nsbox({"rm", id}, {.timeout_s = 60});
    t.join();
    INFO(rm.err);
    REQUIRE(stuck);
    CHECK_FALSE(rm.timed_out);
    CHECK(rm.exit_code == 0);
  }
  CHECK_FALSE(reader.timed_out);
  CHECK(reader.out != std::to_string(64 << 20) + "\n");  // it did not get the object: the sandbox went first
  CHECK(wait_gone(server, std::chrono::seconds(2)));
  CHECK(wait_gone(supervisor, std::chrono::seconds(2)));
  for (const auto& dir : cgroups) {
    INFO(dir);
    CHECK_FALSE(nsbox::files::exists(dir));
  }
  CHECK_FALSE(nsbox::files::exists(root.path() + "/run/sandboxes/" + id));
}

TEST_CASE("rm of a sandbox with builtin, rclone and s3fs mounts is quick and stops every server", "[s3]") {
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  NSBOX_NEEDS(mount_tools());
  S3rverPeer s3({"a", "b", "c"});
  TestRoot root;
  std::string id = create_with_manifest(root, s3, R"([
      {"type": "s3", "bucket": "a", "mount_path": "/a", "read_only": false},
      {"type": "s3", "bucket": "b", "mount_path": "/b", "read_only": false, "strategy": "rclone"},
      {"type": "s3", "bucket": "c", "mount_path": "/c", "read_only": false, "strategy": "s3fs"}])");
  auto r = root.sh(id, "echo 1 > /a/f && echo 2 > /b/f && echo 3 > /c/f && cat /a/f /b/f /c/f");
  INFO(r.err);
  CHECK(r.out == "1\n2\n3\n");
  auto info = TestRoot::json(root.nsbox({"inspect", "--json", id}));
  auto servers = info["mount_servers"].get<std::vector<pid_t>>();
  REQUIRE(servers.size() == 3);
  REQUIRE(staging_leftovers(root, id).size() == 2);  // rclone's and s3fs's caches

  auto rm = root.nsbox({"rm", id}, {.timeout_s = 60});  // a bound on a hang, no more
  INFO(rm.err);
  CHECK_FALSE(rm.timed_out);
  CHECK(rm.exit_code == 0);
  for (pid_t pid : servers) CHECK(wait_gone(pid, std::chrono::seconds(2)));
  CHECK(staging_leftovers(root, id).empty());
}

TEST_CASE("rm after the supervisor was killed removes the mount tool's cache from staging", "[s3]") {
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  NSBOX_NEEDS(mount_tools());
  S3rverPeer s3({"crash"});
  TestRoot root;
  std::string id = create_with_manifest(
      root, s3, R"([{"type": "s3", "bucket": "crash", "mount_path": "/data", "read_only": false, "strategy": "rclone"}])");
  auto r = root.sh(id, "echo cached > /data/f && cat /data/f");
  INFO(r.err);
  CHECK(r.out == "cached\n");
  auto info = TestRoot::json(root.nsbox({"inspect", "--json", id}));
  pid_t supervisor = info["supervisor_pid"].get<pid_t>();
  pid_t server = info["mount_servers"][0].get<pid_t>();
  REQUIRE(staging_leftovers(root, id) == std::vector<std::string>{id + "-0"});

  REQUIRE(::kill(supervisor, SIGKILL) == 0);
  REQUIRE(wait_gone(supervisor, std::chrono::seconds(5)));
  CHECK(wait_gone(server, std::chrono::seconds(5)));  // PR_SET_PDEATHSIG
  CHECK(staging_leftovers(root, id).size() == 1);     // nobody removed it yet
  CHECK(TestRoot::json(root.nsbox({"inspect", "--json", id}))["status"] == "dead");

  auto rm = root.nsbox({"rm", id});
  INFO(rm.err);
  CHECK(rm.exit_code == 0);
  CHECK(staging_leftovers(root, id).empty());
}

TEST_CASE("stop and start keep a sandbox's mounts (the credentials taken again), and a snapshot never holds a mount", "[s3]") {
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  S3rverPeer s3({"kept"});
  TestRoot root;
  std::string id = create_with_manifest(root, s3, R"([{"type": "s3", "bucket": "kept", "mount_path": "/home/user/bucket", "read_only": false}])");
  REQUIRE(root.sh(id, "echo acknowledged > ~/bucket/f && echo own > ~/own").exit_code == 0);
  pid_t server = TestRoot::json(root.nsbox({"inspect", "--json", id}))["mount_servers"][0].get<pid_t>();
  auto stop = root.nsbox({"stop", id});
  INFO(stop.err);
  REQUIRE(stop.exit_code == 0);
  CHECK(wait_gone(server, std::chrono::seconds(5)));
  CHECK(staging_leftovers(root, id).empty());
  auto stopped = TestRoot::json(root.nsbox({"inspect", "--json", id}));
  REQUIRE(stopped["mounts"].size() == 1);
  CHECK(stopped["mounts"][0]["mount_path"] == "/home/user/bucket");
  CHECK(stopped.dump().find(kSecret) == std::string::npos);

  // Without credentials in the environment: a clear error, and the sandbox stays stopped.
  auto bare = root.nsbox({"start", id});
  CHECK(bare.exit_code != 0);
  CHECK(bare.err.find("/home/user/bucket") != std::string::npos);
  CHECK(bare.err.find("AWS_ACCESS_KEY_ID") != std::string::npos);
  CHECK(TestRoot::json(root.nsbox({"inspect", "--json", id}))["status"] == "stopped");

  auto start = root.nsbox({"start", id}, {.extra_env = credentials_env(s3)});
  INFO(start.err);
  REQUIRE(start.exit_code == 0);
  CHECK(root.sh(id, "cat ~/bucket/f && echo again >> ~/bucket/f && cat ~/bucket/f").out == "acknowledged\nacknowledged\nagain\n");
  CHECK(nsbox::files::read_file(root.path() + "/run/sandboxes/" + id + "/state.json")->find(kSecret) == std::string::npos);

  // A snapshot of the running sandbox leaves the mount out: its spec keeps the topology,
  // never a credential.
  auto snap = root.nsbox({"snapshot", "create", "--json", id});
  INFO(snap.err);
  REQUIRE(snap.exit_code == 0);
  auto info = TestRoot::json(snap);
  CHECK(info["spec"]["mounts"][0]["mount_path"] == "/home/user/bucket");
  CHECK(info.dump().find(kSecret) == std::string::npos);
  auto listing = run_process({"/bin/tar", "-tf", root.path() + "/data/snapshots/" + info["id"].get<std::string>() + "/home.tar"});
  CHECK(listing.out.find("own") != std::string::npos);
  CHECK(listing.out.find("bucket") == std::string::npos);
  CHECK(root.nsbox({"snapshot", "rm", info["id"]}).exit_code == 0);
}

TEST_CASE("the credentials are in no host process's environment: not the supervisor's, not the server's", "[s3]") {
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  S3rverPeer s3({"env"});
  TestRoot root;
  auto created = root.nsbox({"create", "--mount", "s3://env:/data"},
                            {.extra_env = [&] {
                              auto env = credentials_env(s3);
                              env.push_back("NSBOX_TEST_MARKER=kept");
                              return env;
                            }()});
  INFO(created.err);
  REQUIRE(created.exit_code == 0);
  std::string id = first_line(created.out);
  auto info = TestRoot::json(root.nsbox({"inspect", "--json", id}));
  std::string proc = "/proc/" + std::to_string(info["supervisor_pid"].get<pid_t>());
  auto supervisor_env = nsbox::files::read_file(proc + "/environ");
  REQUIRE(supervisor_env);
  CHECK(supervisor_env->find(kSecret) == std::string::npos);
  CHECK(supervisor_env->find("AWS_ACCESS_KEY_ID") == std::string::npos);
  CHECK(supervisor_env->find("S3_ENDPOINT_URL") == std::string::npos);
  CHECK(supervisor_env->find("NSBOX_TEST_MARKER=kept") != std::string::npos);  // NSBOX_* stays
  CHECK(supervisor_env->find("PATH=") != std::string::npos);

  auto server_env = nsbox::files::read_file("/proc/" + std::to_string(info["mount_servers"][0].get<pid_t>()) + "/environ");
  REQUIRE(server_env);
  CHECK(server_env->rfind("PATH=", 0) == 0);
  CHECK(server_env->find('\0') == server_env->size() - 1);  // PATH and nothing else
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}

TEST_CASE("resume of a gone sandbox with a mount re-binds credentials only from a trusted manifest of the same topology", "[s3]") {
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  S3rverPeer s3({"resumed"});
  TestRoot root;
  auto write_manifest = [&](const std::string& name, bool read_only) {
    std::string path = root.path() + "/" + name;
    json m = {{"version", 1},
              {"entries", {{"bucket", {{"type", "s3"}, {"bucket", "resumed"}, {"read_only", read_only}}},
                           {"notes.md", {{"type", "file"}, {"content", "notes"}}}}}};
    REQUIRE(nsbox::files::atomic_write(path, m.dump()));
    return path;
  };
  std::string trusted = write_manifest("trusted.json", false);
  auto created = root.nsbox({"create", "--manifest", trusted}, {.extra_env = credentials_env(s3)});
  INFO(created.err);
  REQUIRE(created.exit_code == 0);
  std::string id = first_line(created.out);
  REQUIRE(root.sh(id, "echo in-bucket > ~/bucket/b.txt && echo mine > ~/own.txt").exit_code == 0);
  REQUIRE(root.nsbox({"snapshot", "create", id}).exit_code == 0);
  auto state = root.nsbox({"inspect", id, "--state"});
  REQUIRE(state.exit_code == 0);
  CHECK(state.out.find(kSecret) == std::string::npos);
  CHECK(TestRoot::json(state)["mounts"][0]["mount_path"] == "/home/user/bucket");
  std::string state_file = root.path() + "/state.json";
  REQUIRE(nsbox::files::atomic_write(state_file, state.out));
  REQUIRE(root.nsbox({"rm", id}).exit_code == 0);

  // Refused before anything starts: no manifest, or one whose topology differs.
  auto without = root.nsbox({"resume", state_file}, {.extra_env = credentials_env(s3)});
  CHECK(without.exit_code != 0);
  CHECK(without.err.find("trusted manifest") != std::string::npos);
  auto other = root.nsbox({"resume", state_file, "--manifest", write_manifest("other.json", true)}, {.extra_env = credentials_env(s3)});
  CHECK(other.exit_code != 0);
  CHECK(other.err.find("differs in read_only") != std::string::npos);
  CHECK(TestRoot::json(root.nsbox({"ls", "--json"}))["sandboxes"].empty());

  auto resumed = root.nsbox({"resume", "--json", state_file, "--manifest", trusted}, {.extra_env = credentials_env(s3)});
  INFO(resumed.err);
  REQUIRE(resumed.exit_code == 0);
  auto info = TestRoot::json(resumed);
  CHECK(info["action"] == "recreated");
  std::string again = info["id"];
  CHECK(root.sh(again, "cat ~/own.txt ~/bucket/b.txt").out == "mine\nin-bucket\n");
  CHECK(nsbox::files::read_file(root.path() + "/run/sandboxes/" + again + "/state.json")->find(kSecret) == std::string::npos);
}
