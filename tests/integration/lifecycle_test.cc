// The sandbox's life through the command line: create, ls, inspect, sh, run, rm; bad
// input; a supervisor that dies; a client that misbehaves.
#include <arpa/inet.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <set>
#include <sstream>
#include <thread>

#include "isolation/sys/files.h"

#include "runtime/protocol/frame.h"
#include "runtime/protocol/unix_socket.h"
#include "tests/support/nsbox_cli.h"

using namespace nsbox::test;
using nlohmann::json;

namespace {

// Running: exists and is not a zombie (orphans are reaped by the host's pid 1, which may
// take a while).
bool process_exists(pid_t pid) {
  auto stat = nsbox::files::read_file("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  auto close = stat->rfind(')');
  return close != std::string::npos && close + 2 < stat->size() && (*stat)[close + 2] != 'Z';
}

// Bounded wait for a process to be gone.
bool wait_gone(pid_t pid, int timeout_ms = 5000) {
  for (int waited = 0; waited < timeout_ms; waited += 10) {
    if (!process_exists(pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// The pids in a sandbox's cgroup directory (only this sandbox's processes).
std::vector<pid_t> cgroup_pids(const std::string& dir) {
  std::vector<pid_t> pids;
  auto text = nsbox::files::read_file(dir + "/cgroup.procs");
  if (!text) return pids;
  std::istringstream s(*text);
  for (pid_t p; s >> p;) pids.push_back(p);
  return pids;
}

// One-shot cgroups, on a v1 (memory hierarchy) or v2 host.
std::set<std::string> one_shot_cgroups() {
  std::set<std::string> names;
  for (const char* top : {"/sys/fs/cgroup", "/sys/fs/cgroup/memory"}) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(top, ec))
      if (e.path().filename().string().rfind("nsbox-run-", 0) == 0) names.insert(e.path());
  }
  return names;
}

}  // namespace

TEST_CASE("create, ls, inspect and rm work by id and by name, in text and JSON") {
  TestRoot root;
  auto created = root.nsbox({"create", "--name", "etl", "--size", "medium", "--env", "TOKEN=abc123"});
  REQUIRE(created.exit_code == 0);
  std::string id = created.out.substr(0, created.out.size() - 1);
  CHECK(id.rfind("sbx-", 0) == 0);
  CHECK(id.size() == 10);

  auto ls = root.nsbox({"ls"});
  CHECK(ls.out.find("etl") != std::string::npos);
  CHECK(ls.out.find("medium") != std::string::npos);
  CHECK(ls.out.find("running") != std::string::npos);
  auto list = TestRoot::json(root.nsbox({"ls", "--json"}))["sandboxes"];
  REQUIRE(list.size() == 1);
  CHECK(list[0]["id"] == id);

  for (const std::string& ref : {id, std::string("etl")}) {
    auto info = TestRoot::json(root.nsbox({"--json", "inspect", ref}));
    CHECK(info["id"] == id);
    CHECK(info["name"] == "etl");
    CHECK(info["status"] == "running");
    CHECK(info["limits"]["vcpus"] == 2);
    CHECK(info["limits"]["memory_bytes"] == 2ull << 30);
    CHECK(info["env_names"] == json::array({"TOKEN"}));
  }
  // --env values are secrets to nsbox: never written to state files or shown by inspect.
  CHECK(root.nsbox({"inspect", "--json", "etl"}).out.find("abc123") == std::string::npos);
  for (const auto& f : std::filesystem::recursive_directory_iterator(root.path() + "/run")) {
    if (!f.is_regular_file() || f.path().extension() == ".bpf") continue;
    CHECK(nsbox::files::read_file(f.path())->find("abc123") == std::string::npos);
  }
  CHECK(root.sh("etl", "echo $TOKEN").out == "abc123\n");

  auto rm = root.nsbox({"rm", "--json", "etl"});
  CHECK(rm.exit_code == 0);
  CHECK(TestRoot::json(rm)["removed"] == json::array({id}));
  CHECK(TestRoot::json(root.nsbox({"ls", "--json"}))["sandboxes"].empty());
  CHECK_FALSE(std::filesystem::exists(root.path() + "/data/sandboxes/" + id));
}

TEST_CASE("bad input gets a clear error and changes nothing") {
  TestRoot root;
  auto id = root.create({"--name", "taken"});

  auto size = root.nsbox({"create", "--size", "huge", "--json"});
  CHECK(size.exit_code == 2);
  CHECK(TestRoot::json({0, size.err, ""})["error"]["code"] == "invalid_argument");
  CHECK(size.err.find("unknown size 'huge'") != std::string::npos);

  auto dup = root.nsbox({"create", "--name", "taken", "--json"});
  CHECK(dup.exit_code == 1);
  CHECK(TestRoot::json({0, dup.err, ""})["error"]["code"] == "already_exists");

  auto unknown = root.nsbox({"sh", "nosuch", "--", "true"});
  CHECK(unknown.exit_code == 1);
  CHECK(unknown.err.find("no sandbox 'nosuch'") != std::string::npos);
  CHECK(root.nsbox({"inspect", "--json", "nosuch"}).err.find("\"code\": \"not_found\"") != std::string::npos);

  auto bad_env = root.nsbox({"create", "--env", "NOEQUALS"});
  CHECK(bad_env.exit_code == 2);
  auto bad_name = root.nsbox({"create", "--name", "Bad/Name"});
  CHECK(bad_name.exit_code == 2);
  CHECK(root.nsbox({"frobnicate"}).exit_code == 2);
  CHECK(root.nsbox({"sh", id, "--timeout", "-3", "--", "true"}).exit_code == 2);
  CHECK(root.nsbox({"sh", id}).err.find("no command given") != std::string::npos);

  // None of that created or changed anything.
  auto list = TestRoot::json(root.nsbox({"ls", "--json"}))["sandboxes"];
  REQUIRE(list.size() == 1);
  CHECK(list[0]["name"] == "taken");

  CHECK(root.nsbox({"rm", id}).exit_code == 0);
  auto again = root.nsbox({"rm", "--json", id});
  CHECK(again.exit_code == 1);
  CHECK(again.err.find("not_found") != std::string::npos);
}

TEST_CASE("sh passes the exit status through, runs in /home/user with the sandbox's env, and reads piped stdin") {
  TestRoot root;
  auto id = root.create({"--env", "GREETING=hi"});
  CHECK(root.sh(id, "exit 42").exit_code == 42);
  CHECK(root.sh(id, "pwd; echo $GREETING $EXTRA", {"--env", "EXTRA=there"}).out == "/home/user\nhi there\n");
  auto piped = root.sh(id, "wc -l", {}, {.stdin_data = "a\nb\nc\n"});
  CHECK(piped.out == "3\n");
  // Several words after -- are a program and its arguments, not a shell line.
  auto argv = root.nsbox({"sh", id, "--", "printf", "%s|", "a b", "$HOME"});
  CHECK(argv.out == "a b|$HOME|");
  auto j = TestRoot::json(root.nsbox({"sh", "--json", id, "--", "echo out; echo err >&2; exit 3"}));
  CHECK(j["stdout"] == "out\n");
  CHECK(j["stderr"] == "err\n");
  CHECK(j["exit_code"] == 3);
  CHECK(j["status"] == "error");
}

TEST_CASE("a command that does not exist in the sandbox exits 127 with a message") {
  TestRoot root;
  auto id = root.create();
  auto direct = root.nsbox({"sh", id, "--", "no-such-program", "arg"});
  CHECK(direct.exit_code == 127);
  CHECK(direct.err.find("command not found in the sandbox: no-such-program") != std::string::npos);
  auto via_shell = root.sh(id, "no-such-program");
  CHECK(via_shell.exit_code == 127);
  CHECK(via_shell.err.find("no-such-program: command not found") != std::string::npos);
}

TEST_CASE("output arrives whole and byte-exact, large or binary") {
  TestRoot root;
  auto id = root.create();
  auto big = root.sh(id, "head -c 5000000 /dev/zero | tr '\\0' a");
  CHECK(big.out.size() == 5000000);
  CHECK(big.out.find_first_not_of('a') == std::string::npos);
  auto binary = root.sh(id, "printf '\\377\\000\\001\\376'");
  CHECK(binary.out == std::string("\xff\x00\x01\xfe", 4));
}

TEST_CASE("at the deadline the command's whole process group is killed") {
  TestRoot root;
  auto id = root.create();
  auto r = root.sh(id, "sleep 100 & echo $! > /tmp/bg; sleep 100", {"--timeout", "1"});
  CHECK(r.exit_code == 124);
  CHECK(r.err.find("timed out after 1 s") != std::string::npos);
  CHECK(r.seconds < 60);
  auto bg = root.sh(id, "kill -0 $(cat /tmp/bg) 2>/dev/null && echo alive || echo gone");
  CHECK(bg.out == "gone\n");
}

TEST_CASE("several commands run in one sandbox at once") {
  TestRoot root;
  auto id = root.create();
  std::vector<std::thread> threads;
  std::vector<ProcessResult> results(6);
  for (int i = 0; i < 6; ++i)
    threads.emplace_back([&, i] { results[i] = root.sh(id, "sleep 0.3; echo " + std::to_string(i)); });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 6; ++i) CHECK(results[i].out == std::to_string(i) + "\n");
}

TEST_CASE("SIGKILL of the supervisor leaves nothing running, the sandbox shows as dead and rm cleans it") {
  TestRoot root;
  auto id = root.create();
  REQUIRE(root.sh(id, "sleep 1000 > /dev/null 2>&1 &").exit_code == 0);
  auto info = TestRoot::json(root.nsbox({"inspect", "--json", id}));
  pid_t supervisor = info["supervisor_pid"].get<pid_t>();
  pid_t init = info["init_pid"].get<pid_t>();
  auto cgroup_dirs = info["cgroup"]["dirs"].get<std::vector<std::string>>();
  REQUIRE_FALSE(cgroup_dirs.empty());
  auto inside = cgroup_pids(cgroup_dirs.front());
  REQUIRE(inside.size() >= 2);  // init and the sleep

  REQUIRE(::kill(supervisor, SIGKILL) == 0);
  CHECK(wait_gone(supervisor));
  CHECK(wait_gone(init));
  for (pid_t pid : inside) CHECK(wait_gone(pid));
  CHECK(cgroup_pids(cgroup_dirs.front()).empty());

  CHECK(TestRoot::json(root.nsbox({"inspect", "--json", id}))["status"] == "dead");
  auto sh = root.sh(id, "true");
  CHECK(sh.exit_code == 1);
  CHECK(sh.err.find("is dead") != std::string::npos);
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
  for (const auto& dir : cgroup_dirs) CHECK_FALSE(std::filesystem::exists(dir));
  CHECK_FALSE(std::filesystem::exists(root.path() + "/run/sandboxes/" + id));
}

TEST_CASE("a malformed or oversized control message gets an error and the supervisor keeps serving") {
  TestRoot root;
  auto id = root.create();
  std::string socket = root.path() + "/run/sandboxes/" + id + "/control.sock";
  using nsbox::protocol::Json;

  auto a = nsbox::protocol::connect_unix(socket);
  REQUIRE(a);
  std::string junk = "{not json";
  uint32_t len = htonl(static_cast<uint32_t>(junk.size()));
  std::string frame = std::string(reinterpret_cast<char*>(&len), 4) + junk;
  REQUIRE(::write(a->get(), frame.data(), frame.size()) == static_cast<ssize_t>(frame.size()));
  auto reply = nsbox::protocol::recv_frame(a->get(), 1 << 20);
  REQUIRE(reply);
  REQUIRE(reply->has_value());
  CHECK((*reply)->message["ok"] == false);
  CHECK((*reply)->message["error"]["code"] == "protocol");
  // Same connection, next message: still served.
  REQUIRE(nsbox::protocol::send_frame(a->get(), Json{{"op", "ping"}}));
  CHECK((*nsbox::protocol::recv_frame(a->get(), 1 << 20))->message["ok"] == true);
  REQUIRE(nsbox::protocol::send_frame(a->get(), Json{{"op", "launch-missiles"}}));
  CHECK((*nsbox::protocol::recv_frame(a->get(), 1 << 20))->message["error"]["message"] == "unknown request \"launch-missiles\"");

  auto b = nsbox::protocol::connect_unix(socket);
  REQUIRE(b);
  uint32_t huge = htonl(1u << 30);
  REQUIRE(::write(b->get(), &huge, 4) == 4);
  auto refused = nsbox::protocol::recv_frame(b->get(), 1 << 20);
  REQUIRE(refused);
  REQUIRE(refused->has_value());
  CHECK((*refused)->message["error"]["code"] == "protocol");
  CHECK((*refused)->message["error"]["message"].get<std::string>().find("larger than the limit") != std::string::npos);
  auto closed = nsbox::protocol::recv_frame(b->get(), 1 << 20);
  CHECK((closed && !closed->has_value()));  // that connection is closed...

  CHECK(root.sh(id, "echo served").out == "served\n");  // ...the supervisor is not
}

TEST_CASE("a reader that goes away early does not hurt the sandbox") {
  TestRoot root;
  auto id = root.create();
  // `head` exits after a megabyte; nsbox then dies of SIGPIPE with output still queued.
  auto r = run_process({"/bin/sh", "-c", nsbox_binary() + " --root " + root.path() + " sh " + id + " -- yes | head -c 1000000 | wc -c"});
  CHECK(r.out == "1000000\n");
  CHECK(TestRoot::json(root.nsbox({"inspect", "--json", id}))["status"] == "running");
  CHECK(root.sh(id, "echo alive").out == "alive\n");
}

TEST_CASE("requests with fields of the wrong type get an error, and the supervisor serves on") {
  TestRoot root;
  auto id = root.create();
  std::string socket = root.path() + "/run/sandboxes/" + id + "/control.sock";
  using nsbox::protocol::Json;
  for (const Json& bad : {Json{{"op", 5}}, Json{{"op", "resize"}, {"size", 7}}, Json{{"op", "exec"}, {"argv", "ls"}},
                          Json{{"op", "exec"}, {"argv", {"true"}}, {"timeout_s", "soon"}}}) {
    auto c = nsbox::protocol::connect_unix(socket);
    REQUIRE(c);
    REQUIRE(nsbox::protocol::send_frame(c->get(), bad));
    auto reply = nsbox::protocol::recv_frame(c->get(), 1 << 20);
    REQUIRE(reply);
    REQUIRE(reply->has_value());
    CHECK((*reply)->message["ok"] == false);
    CHECK((*reply)->message["error"]["code"] == "invalid_argument");
  }
  CHECK(root.sh(id, "echo served").out == "served\n");
}

TEST_CASE("JSON output is bounded: the first MiB is kept, the rest counted") {
  TestRoot root;
  auto j = TestRoot::json(root.nsbox({"run", "--json", "--", "head", "-c", "3000000", "/dev/zero"}));
  CHECK(j["stdout_bytes"] == 3000000);
  CHECK(j["stdout_truncated"] == true);
  CHECK(j["stdout"].get<std::string>().size() == 1u << 20);
  auto id = root.create();
  auto sh = TestRoot::json(root.nsbox({"sh", "--json", id, "--", "head -c 10 /dev/zero | tr '\\0' x"}));
  CHECK(sh["stdout"] == "xxxxxxxxxx");
  CHECK(sh["stdout_truncated"] == false);
}

TEST_CASE("an interrupted run removes its sandbox, and one killed outright is cleaned by the next") {
  TestRoot root;
  auto before = one_shot_cgroups();
  // SIGINT to nsbox itself (the shell's $!), a second after it started.
  auto r = run_process({"/bin/sh", "-c", nsbox_binary() + " --root " + root.path() + " run -- sleep 60 & pid=$!; "
                        "sleep 1; kill -INT $pid; wait $pid; echo \"exit=$?\""});
  CHECK(r.out == "exit=130\n");
  CHECK(r.err.find("interrupted by SIGINT; the sandbox was removed") != std::string::npos);
  // SIGKILL leaves the cgroup behind; the next run removes it.
  run_process({"/bin/sh", "-c", nsbox_binary() + " --root " + root.path() + " run -- sleep 60 & pid=$!; sleep 1; kill -KILL $pid; wait $pid"});
  CHECK(root.nsbox({"run", "--", "true"}).exit_code == 0);
  std::set<std::string> left;
  for (const auto& name : one_shot_cgroups())
    if (!before.count(name)) left.insert(name);
  CHECK(left.empty());
}

TEST_CASE("run is one-shot: the exit status and output of the command, and nothing left after") {
  auto cgroups_before = one_shot_cgroups();
  TestRoot root;
  auto r = root.nsbox({"run", "--", "/bin/sh", "-c", "echo hi; id -u; exit 5"});
  CHECK(r.exit_code == 5);
  CHECK(r.out == "hi\n1000\n");
  auto j = TestRoot::json(root.nsbox({"run", "--json", "--size", "large", "--", "nproc"}));
  CHECK(j["exit_code"] == 0);
  CHECK(root.nsbox({"run", "--", "no-such-program"}).exit_code == 127);
  auto t = root.nsbox({"run", "--timeout", "1", "--", "sleep", "30"});
  CHECK(t.exit_code == 124);
  CHECK(TestRoot::json(root.nsbox({"ls", "--json"}))["sandboxes"].empty());
  std::set<std::string> left;
  for (const auto& name : one_shot_cgroups())
    if (!cgroups_before.count(name)) left.insert(name);
  CHECK(left.empty());
}

TEST_CASE("doctor checks the host and names the fix for what is missing") {
  TestRoot root;
  auto r = root.nsbox({"doctor", "--json"});
  auto j = TestRoot::json(r);
  CHECK(j["mode"] == "root");
  std::set<std::string> names;
  for (const auto& c : j["checks"]) {
    names.insert(c["name"].get<std::string>());
    CHECK((c["level"] == "ok" || c["level"] == "warn" || c["level"] == "fail"));
    if (c["level"] != "ok") CHECK(c.contains("fix"));
  }
  for (const char* n :
       {"kernel", "user namespaces", "AppArmor userns restriction", "cgroups", "/dev/fuse", "seccomp", "files quotas", "bucket mounts"})
    CHECK(names.count(n));
  for (const auto& c : j["checks"]) {
    if (c["name"] == "files quotas") CHECK(c["level"] == "ok");  // root with loop devices and e2fsprogs
    if (c["name"] == "bucket mounts") {
      CHECK(c["level"] == "ok");
      CHECK(c["detail"].get<std::string>().starts_with("strategies: builtin"));
    }
  }
  // A strategy whose tool is not on the PATH is named with its package.
  auto bare = TestRoot::json(root.nsbox({"doctor", "--json"}, {.extra_env = {"PATH=/nonexistent"}}));
  for (const auto& c : bare["checks"])
    if (c["name"] == "bucket mounts")
      CHECK(c["detail"].get<std::string>().find("not installed: rclone s3fs (apt-get install rclone s3fs)") != std::string::npos);
  CHECK(r.exit_code == (j["ok"] == true ? 0 : 1));
  CHECK(root.nsbox({"doctor"}).out.find("user namespaces") != std::string::npos);
}
