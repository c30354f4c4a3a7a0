// The sandbox's life through the command line: create, ls, inspect, sh, run, rm; bad
// input; a supervisor that dies; a client that misbehaves.
#include <arpa/inet.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>
#include <thread>

#include "isolation/sys/files.h"

#include "runtime/protocol/frame.h"
#include "runtime/protocol/unix_socket.h"
#include "tests/support/host_features.h"
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

// The cgroups a one-shot `nsbox run` with process id `pid` made: it names them
// nsbox-run-<pid>-<random>, at the top of each v1 hierarchy or of the v2 tree. Only the
// test's own runs count: other nsbox runs on the host may come and go meanwhile.
std::vector<std::string> one_shot_cgroups_of(pid_t pid) {
  std::vector<std::string> found;
  std::string prefix = "nsbox-run-" + std::to_string(pid) + "-";
  std::vector<std::filesystem::path> tops = {"/sys/fs/cgroup"};
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/sys/fs/cgroup", ec))
    if (e.is_directory(ec) && !e.is_symlink(ec)) tops.push_back(e.path());
  for (const auto& top : tops)
    for (const auto& e : std::filesystem::directory_iterator(top, ec))
      if (e.path().filename().string().rfind(prefix, 0) == 0) found.push_back(e.path());
  return found;
}

// `nsbox --root ROOT ARGS...` through a shell that says its pid, then execs nsbox under it:
// the pid a one-shot names its cgroups after.
struct PidRun {
  pid_t pid = 0;
  ProcessResult result;
};
PidRun run_with_pid(const TestRoot& root, const std::vector<std::string>& args, const ProcessOptions& options = {}) {
  std::vector<std::string> argv = {"/bin/sh", "-c", "echo $$ >&2; exec \"$@\"", "sh", nsbox_binary(), "--root", root.path()};
  argv.insert(argv.end(), args.begin(), args.end());
  PidRun run;
  run.result = run_process(argv, options);
  auto newline = run.result.err.find('\n');
  REQUIRE(newline != std::string::npos);
  run.pid = static_cast<pid_t>(std::stol(run.result.err.substr(0, newline)));
  run.result.err.erase(0, newline + 1);
  return run;
}

// The processes whose argv[0] is `token` (given with bash's exec -a; the nsbox command
// that started one has it further along its command line).
std::vector<pid_t> processes_with(const std::string& token) {
  std::vector<pid_t> pids;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    auto cmdline = nsbox::files::read_file(e.path().string() + "/cmdline");
    if (cmdline && cmdline->rfind(token + '\0', 0) == 0 && process_exists(std::stoi(name))) pids.push_back(std::stoi(name));
  }
  return pids;
}

// A name no other process on the host has.
std::string unique_token() { return "nsbox-test-marker-" + std::to_string(::getpid()) + "-" + std::to_string(::random()); }

// The `doctor --json` check called `name`; REQUIREs that there is one.
json doctor_check(const json& doctor, const std::string& name) {
  for (const auto& c : doctor["checks"])
    if (c["name"] == name) return c;
  FAIL("doctor has no check named '" << name << "': " << doctor.dump());
  return {};
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
  int state_files = 0;
  for (const auto& f : std::filesystem::recursive_directory_iterator(root.path() + "/run")) {
    if (!f.is_regular_file() || f.path().extension() == ".bpf") continue;
    if (f.path().filename() == "state.json") ++state_files;
    auto text = nsbox::files::read_file(f.path(), 64 << 20);
    REQUIRE(text);
    CHECK(text->find("abc123") == std::string::npos);
  }
  CHECK(state_files == 1);  // the record was among the files searched
  CHECK(root.sh("etl", "echo $TOKEN").out == "abc123\n");

  auto rm = root.nsbox({"rm", "--json", "etl"});
  CHECK(rm.exit_code == 0);
  CHECK(TestRoot::json(rm)["removed"] == json::array({id}));
  CHECK(TestRoot::json(root.nsbox({"ls", "--json"}))["sandboxes"].empty());
  CHECK_FALSE(std::filesystem::exists(root.path() + "/data/sandboxes/" + id));
}

TEST_CASE("bad input gets a clear error and changes nothing", "[zygote]") {
  TestRoot root;
  auto id = root.create({"--name", "taken"});

  auto size = root.nsbox({"create", "--size", "huge", "--json"});
  CHECK(size.exit_code == 2);
  CHECK(TestRoot::json({0, size.err, ""})["error"]["code"] == "invalid_argument");
  CHECK(size.err.find("unknown size 'huge'") != std::string::npos);

  auto dup = root.nsbox({"create", "--name", "taken", "--json"});
  CHECK(dup.exit_code == 1);
  CHECK(TestRoot::json({0, dup.err, ""})["error"]["code"] == "already_exists");

  // sh, run and exec pass on their command's status: nsbox's own failures are 125.
  auto unknown = root.nsbox({"sh", "nosuch", "--", "true"});
  CHECK(unknown.exit_code == 125);
  CHECK(unknown.err.find("no sandbox 'nosuch'") != std::string::npos);
  CHECK(root.nsbox({"inspect", "--json", "nosuch"}).err.find("\"code\": \"not_found\"") != std::string::npos);

  auto bad_env = root.nsbox({"create", "--env", "NOEQUALS"});
  CHECK(bad_env.exit_code == 2);
  auto bad_name = root.nsbox({"create", "--name", "Bad/Name"});
  CHECK(bad_name.exit_code == 2);
  CHECK(root.nsbox({"frobnicate"}).exit_code == 2);
  CHECK(root.nsbox({"sh", id, "--timeout", "-3", "--", "true"}).exit_code == 125);
  CHECK(root.nsbox({"run", "--size", "huge", "--", "true"}).exit_code == 125);
  auto not_python = root.nsbox({"exec", id, "ls", "-la"});
  CHECK(not_python.exit_code == 125);
  CHECK(not_python.err.find("for a command: nsbox sh " + id + " -- ls -la") != std::string::npos);
  auto help = root.nsbox({"create", "--help"});
  CHECK(help.exit_code == 0);
  CHECK(help.out.find("--mount URL:PATH[:rw]") != std::string::npos);
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

TEST_CASE("a sandbox whose time to live runs out is removed by its supervisor, volumes, name and cgroup with it") {
  TestRoot root;
  auto bad = root.nsbox({"create", "--ttl", "soon"});
  CHECK(bad.exit_code != 0);
  CHECK(bad.err.find("\"ttl_s\" must be whole seconds, at most 2592000") != std::string::npos);
  CHECK(root.nsbox({"create", "--ttl", "2592001"}).exit_code != 0);
  CHECK(TestRoot::json(root.nsbox({"ls", "--json"}))["sandboxes"].empty());  // nothing made

  auto id = root.create({"--ttl", "3", "--name", "brief"});
  auto kept = root.create({"--name", "kept"});
  auto info = TestRoot::json(root.nsbox({"inspect", "--json", id}));
  CHECK(info["ttl_s"] == 3);
  const std::string files = info["files"]["path"].get<std::string>();
  const std::string home = info["home"]["path"].get<std::string>();
  const auto cgroups = info["cgroup"]["dirs"];
  CHECK(std::filesystem::exists(files));
  CHECK(root.sh(id, "echo alive").out == "alive\n");
  // The supervisor holds the deadline: no server runs here, nor any nsbox command while
  // it passes. Bounded: 3 s of life and a removal.
  bool gone = false;
  for (int waited = 0; waited < 60000 && !gone; waited += 100) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    gone = !std::filesystem::exists(root.path() + "/run/sandboxes/" + id);
  }
  REQUIRE(gone);
  auto inspect = root.nsbox({"inspect", "--json", "brief"});
  CHECK(inspect.exit_code != 0);
  CHECK(inspect.err.find("not_found") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(files));
  CHECK_FALSE(std::filesystem::exists(home));
  for (const auto& dir : cgroups) CHECK_FALSE(std::filesystem::exists(dir.get<std::string>()));
  // The name is free again, and the other sandbox never noticed.
  CHECK(root.nsbox({"create", "--name", "brief"}).exit_code == 0);
  CHECK(root.sh(kept, "echo still").out == "still\n");
  CHECK(root.nsbox({"rm", "brief", kept}).exit_code == 0);
}

TEST_CASE("nsbox ttl sets or extends a running sandbox's time to live, and inspect shows when it runs out") {
  TestRoot root;
  auto id = root.create({"--ttl", "3"});
  auto first = TestRoot::json(root.nsbox({"inspect", "--json", id}));
  REQUIRE(first.contains("expires_at"));
  // Extended well before its end: still there after its first deadline has passed.
  auto extended = root.nsbox({"ttl", "--json", id, "600"});
  REQUIRE(extended.exit_code == 0);
  CHECK(TestRoot::json(extended)["expires_at"].get<std::string>() > first["expires_at"].get<std::string>());
  std::this_thread::sleep_for(std::chrono::seconds(5));
  CHECK(root.sh(id, "echo alive").out == "alive\n");
  // A sandbox made without one gets one; a stopped one has none running, and refuses one.
  auto plain = root.create();
  CHECK_FALSE(TestRoot::json(root.nsbox({"inspect", "--json", plain})).contains("expires_at"));
  CHECK(root.nsbox({"ttl", plain, "0"}).exit_code != 0);
  CHECK(root.nsbox({"ttl", plain, "later"}).err.find("\"ttl_s\" must be whole seconds") != std::string::npos);
  REQUIRE(root.nsbox({"stop", id}).exit_code == 0);
  CHECK_FALSE(TestRoot::json(root.nsbox({"inspect", "--json", id})).contains("expires_at"));
  CHECK(root.nsbox({"ttl", id, "60"}).err.find("stopped") != std::string::npos);
  REQUIRE(root.nsbox({"ttl", plain, "1"}).exit_code == 0);
  bool gone = false;
  for (int waited = 0; waited < 60000 && !gone; waited += 100) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    gone = !std::filesystem::exists(root.path() + "/run/sandboxes/" + plain);
  }
  CHECK(gone);
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
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
  // 60 s: only a bound on a hang; the deadline is told by the exit status and message.
  auto r = root.sh(id, "sleep 100 & echo $! > /tmp/bg; sleep 100", {"--timeout", "1"}, {.timeout_s = 60});
  CHECK_FALSE(r.timed_out);
  CHECK(r.exit_code == 124);
  CHECK(r.err.find("timed out after 1 s") != std::string::npos);
  auto bg = root.sh(id, "kill -0 $(cat /tmp/bg) 2>/dev/null && echo alive || echo gone");
  CHECK(bg.out == "gone\n");
}

// Each command waits (60 s at most) until all six have started: run one after another,
// the first would say it ran alone.
TEST_CASE("several commands run in one sandbox at once") {
  TestRoot root;
  auto id = root.create();
  REQUIRE(root.sh(id, "mkdir /tmp/at-once").exit_code == 0);
  std::vector<std::thread> threads;
  std::vector<ProcessResult> results(6);
  for (int i = 0; i < 6; ++i)
    threads.emplace_back([&, i] {
      results[i] = root.sh(id, "touch /tmp/at-once/" + std::to_string(i) +
                                   "; for t in $(seq 600); do [ $(ls /tmp/at-once | wc -l) -ge 6 ] && break; sleep 0.1; done; "
                                   "echo $(ls /tmp/at-once | wc -l) " + std::to_string(i));
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 6; ++i) CHECK(results[i].out == "6 " + std::to_string(i) + "\n");
}

TEST_CASE("SIGKILL of the supervisor leaves nothing running, the sandbox shows as dead and rm cleans it") {
  NSBOX_NEEDS(cgroup_limits());  // the sandbox's processes are found through its cgroup
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
  CHECK(sh.exit_code == 125);  // nsbox's own failure, not the command's
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
  // (SIGPIPE as a shell leaves it by default: the test process may have ignored it, and an
  // ignored signal stays ignored across exec.) 60 s only bounds a hang.
  auto r = run_process({"/bin/sh", "-c", "env --default-signal=PIPE " + nsbox_binary() + " --root " + root.path() + " sh " + id +
                                             " -- yes | head -c 1000000 | wc -c"},
                       {.timeout_s = 60});
  CHECK_FALSE(r.timed_out);
  CHECK(r.out == "1000000\n");
  CHECK(TestRoot::json(root.nsbox({"inspect", "--json", id}))["status"] == "running");
  CHECK(root.sh(id, "echo alive").out == "alive\n");
}

// nsbox sh and nsbox run end when their stdout is a pipe whose reader has gone and
// SIGPIPE is ignored, as a caller that ignores it (many language runtimes do) passes on to
// the programs it starts: at EPIPE, as any program, and they take their command with it.
TEST_CASE("a reader that goes away ends sh and run even where SIGPIPE is ignored") {
  TestRoot root;
  auto id = root.create();
  for (const std::string& command : {"sh " + id + " -- yes", std::string("run -- yes")}) {
    INFO(command);
    // The pipeline's first command says nsbox's pid, then becomes it.
    std::string nsbox = "sh -c 'echo $$ >&2; exec env --ignore-signal=PIPE " + nsbox_binary() + " --root " + root.path() + " " +
                        command + "'";
    BackgroundProcess pipeline({"/bin/sh", "-c", nsbox + " | head -c 1000000 | wc -c"});
    REQUIRE(pipeline.wait_for_output("\n"));
    pid_t pid = std::stoi(pipeline.output().substr(pipeline.output().find("stderr: ") + 8));
    bool ended = pipeline.exited_within(20);  // a bound on the hang this is about
    // Past it, SIGTERM: nsbox removes what it made (a SIGKILLed run would leave its cgroup).
    if (!ended) ::kill(pid, SIGTERM);
    auto r = pipeline.wait(60);
    CHECK(ended);
    CHECK(r.out == "1000000\n");
  }
  CHECK(root.sh(id, "pgrep -c -x yes || true").out == "0\n");
}

TEST_CASE("requests with fields of the wrong type get an error, and the supervisor serves on", "[zygote]") {
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
  NSBOX_NEEDS(cgroup_limits());  // what a run leaves is looked for among cgroups
  TestRoot root;
  // SIGINT to nsbox itself, once its command runs (it says so).
  auto interrupted = root.start({"run", "--", "/bin/sh", "-c", "echo started; exec sleep 60"});
  REQUIRE(interrupted->wait_for_output("started"));
  REQUIRE(interrupted->signal(SIGINT));
  auto r = interrupted->wait(60);
  CHECK(r.exit_code == 130);
  CHECK(r.err.find("interrupted by SIGINT; the sandbox was removed") != std::string::npos);
  CHECK(one_shot_cgroups_of(interrupted->pid()).empty());
  // SIGKILL leaves the cgroup behind; the next run removes it.
  auto killed = root.start({"run", "--", "/bin/sh", "-c", "echo started; exec sleep 60"});
  REQUIRE(killed->wait_for_output("started"));
  CHECK_FALSE(one_shot_cgroups_of(killed->pid()).empty());  // what there is to clean
  REQUIRE(killed->signal(SIGKILL));
  CHECK(killed->wait(60).exit_code == 128 + SIGKILL);
  auto next = run_with_pid(root, {"run", "--", "true"});
  CHECK(next.result.exit_code == 0);
  CHECK(one_shot_cgroups_of(killed->pid()).empty());
  CHECK(one_shot_cgroups_of(next.pid).empty());
}

TEST_CASE("a run ended by SIGTERM or SIGHUP removes its sandbox and leaves nothing running") {
  NSBOX_NEEDS(cgroup_limits());  // what a run leaves is looked for among cgroups
  TestRoot root;
  for (int sig : {SIGTERM, SIGHUP}) {
    std::string name = sigabbrev_np(sig);
    INFO("SIG" << name);
    std::string token = unique_token();
    auto run = root.start({"run", "--", "/bin/bash", "-c", "echo started; exec -a " + token + " sleep 60"});
    REQUIRE(run->wait_for_output("started"));
    // The command, seen from the host, once bash has exec'd it (just after saying so).
    auto before = processes_with(token);
    for (int i = 0; i < 1000 && before.empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      before = processes_with(token);
    }
    CHECK(before.size() == 1);
    CHECK_FALSE(one_shot_cgroups_of(run->pid()).empty());
    REQUIRE(run->signal(sig));
    auto r = run->wait(60);
    INFO(r.err);
    CHECK_FALSE(r.timed_out);
    CHECK(r.exit_code == 128 + sig);
    CHECK(r.err.find("interrupted by SIG" + name + "; the sandbox was removed") != std::string::npos);
    for (pid_t pid : before) CHECK(wait_gone(pid));
    CHECK(processes_with(token).empty());
    CHECK(one_shot_cgroups_of(run->pid()).empty());
  }
  CHECK(TestRoot::json(root.nsbox({"ls", "--json"}))["sandboxes"].empty());
  auto mounts = nsbox::files::read_file("/proc/self/mountinfo", 16 << 20);
  REQUIRE(mounts);
  CHECK(mounts->find(root.path()) == std::string::npos);
}

TEST_CASE("sh takes its command, and what the command started, with it when the client goes away") {
  TestRoot root;
  auto id = root.create();
  auto client = root.start({"sh", id, "--", "sleep 1000 & echo $! > /tmp/bg.pid; echo $$ > /tmp/cmd.pid; echo started; wait"});
  REQUIRE(client->wait_for_output("started"));
  auto alive = root.sh(id, "kill -0 $(cat /tmp/cmd.pid) && kill -0 $(cat /tmp/bg.pid) && echo both alive");
  REQUIRE(alive.out == "both alive\n");
  REQUIRE(client->signal(SIGKILL));
  CHECK(client->wait(60).exit_code == 128 + SIGKILL);
  // Gone within a bounded wait (the supervisor sees the connection close, then kills).
  auto gone = root.sh(id,
                      "for i in $(seq 600); do kill -0 $(cat /tmp/cmd.pid) 2>/dev/null || kill -0 $(cat /tmp/bg.pid) 2>/dev/null "
                      "|| { echo both gone; exit 0; }; sleep 0.05; done; ps -eo pid,pgid,comm",
                      {}, {.timeout_s = 90});
  INFO(gone.err);
  CHECK(gone.out == "both gone\n");
  CHECK(TestRoot::json(root.nsbox({"inspect", "--json", id}))["status"] == "running");
  CHECK(root.sh(id, "echo still serving").out == "still serving\n");
}

TEST_CASE("run is one-shot: the exit status and output of the command, and nothing left after") {
  NSBOX_NEEDS(cgroup_limits());  // what a run leaves is looked for among cgroups
  TestRoot root;
  std::vector<pid_t> runs;
  auto run = [&](const std::vector<std::string>& args) {
    auto r = run_with_pid(root, args);
    runs.push_back(r.pid);
    return r.result;
  };
  auto r = run({"run", "--", "/bin/sh", "-c", "echo hi; id -u; exit 5"});
  CHECK(r.exit_code == 5);
  CHECK(r.out == "hi\n1000\n");
  auto j = TestRoot::json(run({"run", "--json", "--size", "large", "--", "nproc"}));
  CHECK(j["exit_code"] == 0);
  CHECK(run({"run", "--", "no-such-program"}).exit_code == 127);
  auto t = run({"run", "--timeout", "1", "--", "sleep", "30"});
  CHECK(t.exit_code == 124);
  CHECK(TestRoot::json(root.nsbox({"ls", "--json"}))["sandboxes"].empty());
  REQUIRE(runs.size() == 4);
  for (pid_t pid : runs) CHECK(one_shot_cgroups_of(pid).empty());
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
  // Root with loop devices and e2fsprogs: quotas hold; without loop devices, said.
  auto quotas = doctor_check(j, "files quotas");
  CHECK(quotas["level"] == (loop_devices().present ? "ok" : "warn"));
  auto buckets = doctor_check(j, "bucket mounts");
  CHECK(buckets["level"] == "ok");
  CHECK(buckets["detail"].get<std::string>().starts_with("strategies: builtin"));
  if (mount_tools().present) CHECK(buckets["detail"].get<std::string>().find("not installed") == std::string::npos);
  // A strategy whose tool is not on the PATH is named with its package.
  auto bare = TestRoot::json(root.nsbox({"doctor", "--json"}, {.extra_env = {"PATH=/nonexistent"}}));
  CHECK(doctor_check(bare, "bucket mounts")["detail"].get<std::string>().find(
            "not installed: rclone s3fs (apt-get install rclone s3fs)") != std::string::npos);
  CHECK(r.exit_code == (j["ok"] == true ? 0 : 1));
  CHECK(root.nsbox({"doctor"}).out.find("user namespaces") != std::string::npos);
}

TEST_CASE("NSBOX_ROOT keeps all state under it when no --root is given, and --root wins over it") {
  TestRoot root;   // NSBOX_ROOT; its destructor removes what is left there
  TestRoot other;  // given with --root while NSBOX_ROOT is set
  const ProcessOptions with_env{.extra_env = {"NSBOX_ROOT=" + root.path()}};
  auto created = run_process({nsbox_binary(), "create", "--json"}, with_env);
  INFO(created.err);
  REQUIRE(created.exit_code == 0);
  std::string id = TestRoot::json(created)["id"];
  CHECK(nsbox::files::exists(root.path() + "/run/sandboxes/" + id + "/state.json"));
  auto info = TestRoot::json(root.nsbox({"inspect", "--json", id}));  // the same root, by --root
  CHECK(info["files"]["path"].get<std::string>().rfind(root.path() + "/data/volumes/", 0) == 0);
  CHECK(run_process({nsbox_binary(), "sh", id, "--", "echo here"}, with_env).out == "here\n");

  auto elsewhere = run_process({nsbox_binary(), "--root", other.path(), "create", "--json"}, with_env);
  INFO(elsewhere.err);
  REQUIRE(elsewhere.exit_code == 0);
  std::string other_id = TestRoot::json(elsewhere)["id"];
  CHECK(nsbox::files::exists(other.path() + "/run/sandboxes/" + other_id + "/state.json"));
  CHECK_FALSE(nsbox::files::exists(root.path() + "/run/sandboxes/" + other_id));
  auto listed = TestRoot::json(run_process({nsbox_binary(), "ls", "--json"}, with_env))["sandboxes"];
  REQUIRE(listed.size() == 1);
  CHECK(listed[0]["id"] == id);

  CHECK(run_process({nsbox_binary(), "rm", id}, with_env).exit_code == 0);
  CHECK_FALSE(nsbox::files::exists(root.path() + "/run/sandboxes/" + id));
  CHECK(run_process({nsbox_binary(), "--root", other.path(), "rm", other_id}, with_env).exit_code == 0);
}

namespace {

// Every path under `dir` (none if it does not exist), to tell afterwards what a test added.
std::set<std::string> paths_under(const std::string& dir) {
  std::set<std::string> paths;
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) return paths;
  paths.insert(dir);
  for (auto it = std::filesystem::recursive_directory_iterator(dir, std::filesystem::directory_options::skip_permission_denied, ec);
       it != std::filesystem::recursive_directory_iterator(); it.increment(ec))
    paths.insert(it->path());
  return paths;
}

// The host's default state directories as a test found them: what it adds there is taken
// away again, and nothing that was there is touched. Only what is plainly the test's goes:
// paths naming its sandbox, compiled filters in the cache (any nsbox rebuilds one in a
// millisecond), and directories left empty; anything else someone may have put there meanwhile stays.
class DefaultStateDirs {
 public:
  static constexpr const char* kRun = "/run/nsbox";
  static constexpr const char* kData = "/var/lib/nsbox";
  DefaultStateDirs() : before_run_(paths_under(kRun)), before_data_(paths_under(kData)) {}
  ~DefaultStateDirs() {
    if (!id_.empty()) run_process({nsbox_binary(), "rm", id_}, {.extra_env = {"NSBOX_ROOT="}});
    // The supervisor and what it forked can outlive `rm` by a moment; what they make is
    // added once they are done.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (pid_t pid : processes_)
      while (process_exists(pid) && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (const auto* before : {&before_run_, &before_data_}) {
      std::string top = before == &before_run_ ? kRun : kData;
      auto now = paths_under(top);
      std::vector<std::string> added;
      for (const auto& p : now)
        if (!before->count(p)) added.push_back(p);
      std::sort(added.rbegin(), added.rend());  // children before their directory
      for (const auto& p : added) {
        std::error_code ec;
        bool ours = (!id_.empty() && p.find(id_) != std::string::npos) ||
                    (p.rfind(std::string(kRun) + "/cache/", 0) == 0 && p.ends_with(".bpf")) ||
                    ((p.rfind(std::string(kData) + "/volumes/", 0) == 0 || p.rfind(std::string(kData) + "/homes/", 0) == 0) &&
                     is_store_image(std::filesystem::path(p).filename()));
        if (std::filesystem::is_directory(std::filesystem::symlink_status(p, ec))) ::rmdir(p.c_str());
        else if (ours) ::unlink(p.c_str());
      }
    }
  }
  void created(const std::string& id) { id_ = id; }
  // Its supervisor, and what that forked: waited for before the cleanup.
  void supervised_by(pid_t supervisor) {
    processes_.push_back(supervisor);
    for (pid_t pid : processes_of(kData))
      if (parent_of(pid) == supervisor) processes_.push_back(pid);
  }

 private:
  static pid_t parent_of(pid_t pid) {
    auto stat = nsbox::files::read_file("/proc/" + std::to_string(pid) + "/stat").value_or("");
    auto close = stat.rfind(')');
    return close == std::string::npos ? 0 : static_cast<pid_t>(std::atoi(stat.c_str() + close + 4));
  }
  std::set<std::string> before_run_, before_data_;
  std::string id_;
  std::vector<pid_t> processes_;
};

}  // namespace

TEST_CASE("with neither --root nor NSBOX_ROOT, root keeps state in /run/nsbox and /var/lib/nsbox") {
  NSBOX_NEEDS(root());  // the defaults for root are what this test checks
  const ProcessOptions no_root{.extra_env = {"NSBOX_ROOT="}};  // empty: unset
  std::string id;
  {
    DefaultStateDirs dirs;
    auto created = run_process({nsbox_binary(), "create", "--json"}, no_root);
    INFO(created.err);
    REQUIRE(created.exit_code == 0);
    id = TestRoot::json(created)["id"];
    dirs.created(id);
    CHECK(nsbox::files::exists(std::string(DefaultStateDirs::kRun) + "/sandboxes/" + id + "/state.json"));
    auto info = TestRoot::json(run_process({nsbox_binary(), "inspect", "--json", id}, no_root));
    dirs.supervised_by(info["supervisor_pid"].get<pid_t>());
    std::string volume = info["files"]["path"];
    CHECK(volume.rfind(std::string(DefaultStateDirs::kData) + "/volumes/", 0) == 0);
    CHECK(nsbox::files::exists(volume));
    CHECK(run_process({nsbox_binary(), "sh", id, "--", "echo here"}, no_root).out == "here\n");
    CHECK(run_process({nsbox_binary(), "rm", id}, no_root).exit_code == 0);
    CHECK_FALSE(nsbox::files::exists(std::string(DefaultStateDirs::kRun) + "/sandboxes/" + id));
    CHECK_FALSE(nsbox::files::exists(volume));
  }
  // The test's traces are gone again (what others added meanwhile is theirs).
  for (const char* top : {DefaultStateDirs::kRun, DefaultStateDirs::kData})
    for (const auto& p : paths_under(top)) CHECK(p.find(id) == std::string::npos);
}
