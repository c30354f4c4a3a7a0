// Hostile code in a sandbox against its tool bridge (issue 33, finding 1): what a sandbox
// sends to the bridge's socket or its kernel's channel must cost the host's bridge and
// supervisor a bounded amount of memory, whatever its shape, while the tools are slow
// (docs/tools.md, "Limits"). Memory is read from /proc by pid, never timed.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <dirent.h>
#include <filesystem>
#include <fstream>

#include "isolation/sys/files.h"
#include "tests/support/host_features.h"
#include "tests/support/nsbox_cli.h"
#include "tests/support/temp_dir.h"

using namespace nsbox::test;
using nlohmann::json;

namespace {

// VmRSS and VmHWM (peak) of a process, in bytes; zeros once it is gone.
struct Memory {
  uint64_t rss = 0;
  uint64_t peak = 0;
};

Memory memory_of(pid_t pid) {
  auto status = nsbox::files::read_file("/proc/" + std::to_string(pid) + "/status");
  if (!status) return {};
  auto field = [&](const std::string& name) -> uint64_t {
    size_t at = status->find(name + ":");
    return at == std::string::npos ? 0 : std::stoull(status->substr(at + name.size() + 1)) * 1024;
  };
  return {field("VmRSS"), field("VmHWM")};
}

// The supervisor's child running nsbox-toolbridge (comm is cut to 15 characters).
pid_t bridge_of(pid_t supervisor) {
  pid_t found = -1;
  DIR* d = ::opendir("/proc");
  REQUIRE(d);
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    auto status = nsbox::files::read_file(std::string("/proc/") + e->d_name + "/status");
    if (!status || status->find("Name:\tnsbox-toolbridg") == std::string::npos) continue;
    size_t at = status->find("PPid:");
    if (at != std::string::npos && std::stol(status->substr(at + 5)) == supervisor) found = std::stoi(e->d_name);
  }
  ::closedir(d);
  return found;
}

// Python, run in the sandbox, that attacks the bridge socket while SLOW calls hold every
// thread of the bridge's pool. It prints one JSON line "attacked" when everything is sent
// and held, then waits for the answers of the calls that were taken (they come when the
// test releases SLOW) and prints "answered".
const std::string kAttack = R"PY(import json, socket, struct, sys, threading, time
LIMIT = 4 << 20
def conn():
    s = socket.socket(socket.AF_UNIX); s.connect("/run/nsbox/bridge.sock"); return s
def frame(body):
    return struct.pack(">I", len(body)) + body
def call(i, arguments, helper="run_tool"):
    return frame(json.dumps({"call": i, "helper": helper, "args": {"tool": "SLOW", "arguments": arguments}},
                            separators=(",", ":")).encode())
def raw_call(i, arguments_text):  # 4 MiB of JSON json.dumps would take long to make
    return frame(b'{"call":%d,"helper":"run_tool","args":{"tool":"SLOW","arguments":{"a":' % i + arguments_text + b'}}}')
class Answers:
    def __init__(self, s):
        self.s, self.got, self.closed, self.changed = s, {}, False, threading.Condition()
        threading.Thread(target=self.read, daemon=True).start()
    def read(self):
        buf = b""
        while True:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                with self.changed:
                    self.closed = True; self.changed.notify_all()
                return
            buf += chunk
            while len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[:4], "big"):
                n = int.from_bytes(buf[:4], "big"); m = json.loads(buf[4:4 + n]); buf = buf[4 + n:]
                with self.changed:
                    self.got[m["call"]] = m; self.changed.notify_all()
    def wait(self, ids, timeout):  # a bound on a wait, not an assertion
        with self.changed:
            self.changed.wait_for(lambda: self.closed or all(i in self.got for i in ids), timeout)
            return [self.got.get(i) for i in ids]
# The pool's 16 threads, each in a call that waits for the test.
slow = conn(); slow_answers = Answers(slow)
slow.sendall(b"".join(call(i, {}) for i in range(1, 17)))
# 24 calls of ~4 MiB each (a string: legal in shape): queued behind the pool until the
# bridge holds its budget of bytes, then refused at once.
# A call the supervisor answers itself (an unknown helper) after them: its answer comes
# after those of every frame before it on the connection.
def ping(s, i):
    s.sendall(frame(json.dumps({"call": i, "helper": "no_such_helper", "args": {}}).encode()))
big = conn(); big_answers = Answers(big)
for i in range(101, 125):
    big.sendall(call(i, {"s": "x" * (LIMIT - 200)}))
ping(big, 199)
big_answers.wait([199], 600)
refused = [a for i, a in big_answers.got.items() if 101 <= i < 125 and a["error"]]
# Frames over the parse limits: 4 MiB of [[],[],...] (1.4 million values) on 4
# connections, and 4 MiB of [[[[...]]]] (2 million levels), each followed by a ping.
wide = b"[" + b",".join([b"[]"] * ((LIMIT - 100) // 3)) + b"]"
deep = b"[" * ((LIMIT - 100) // 2) + b"]" * ((LIMIT - 100) // 2)
shaped = [conn() for _ in range(5)]
shaped_answers = [Answers(s) for s in shaped]
for k, s in enumerate(shaped):
    s.sendall(raw_call(200 + k, deep if k == 4 else wide))
    ping(s, 300 + k)
shaped_seen = sum(1 for k, a in enumerate(shaped_answers) if a.wait([300 + k], 600)[0])
# Frames never finished: 24 connections each send all but the last bytes of a 4 MiB
# frame. A sendall still blocked after 10 s is one the supervisor did not read.
def partial(s, done):
    s.settimeout(10)
    try:
        s.sendall(struct.pack(">I", LIMIT - 8) + b"x" * (LIMIT - 16)); done.append(1)
    except OSError:
        pass
unfinished, done = [conn() for _ in range(24)], []
threads = [threading.Thread(target=partial, args=(s, done)) for s in unfinished]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps({"attacked": True, "refused": sorted({a["error"] for a in refused}), "taken": 24 - len(refused),
                  "shaped_seen": shaped_seen, "unfinished_read": len(done)}), flush=True)
taken = [i for i in range(101, 125) if big_answers.got.get(i) is None]
answers = slow_answers.wait(range(1, 17), 600) + big_answers.wait(taken, 600)
print(json.dumps({"answered": sum(1 for a in answers if a and a["error"] is None), "of": len(answers)}), flush=True)
)PY";

json line_with(const std::string& output, const std::string& key) {
  size_t at = output.find("{\"" + key + "\"");
  REQUIRE(at != std::string::npos);
  return json::parse(output.substr(at, output.find('\n', at) - at));
}

}  // namespace

TEST_CASE("a sandbox flooding its tool bridge while the tools are slow costs the host's bridge and supervisor tens of MiB, and is told the limits", "[tools]") {
  TempDir tools("nsbox-tools");
  // SLOW holds a thread of the bridge's pool until the test creates SLOW.release.
  std::ofstream(tools.path() + "/SLOW") << "#!/bin/sh\ncat >/dev/null\nwhile [ ! -e \"$0.release\" ]; do sleep 0.1; done\necho '{}'\n";
  std::ofstream(tools.path() + "/NOOP") << "#!/bin/sh\ncat >/dev/null\necho '{}'\n";
  ::chmod((tools.path() + "/SLOW").c_str(), 0755);
  ::chmod((tools.path() + "/NOOP").c_str(), 0755);
  std::string config = tools.path() + "/tools.json";  // not executable: not a tool
  std::ofstream(config) << R"({"call_timeout_s": 900})";
  ::chmod(config.c_str(), 0600);

  TestRoot root;
  std::vector<std::string> flags = {"--tools-dir", tools.path(), "--tools-config", config};
  auto attacker = root.create(flags);
  auto neighbour = root.create(flags);
  const std::string noop = "import json; print(json.dumps(run_tool('NOOP', {})))";
  REQUIRE(root.cell(attacker, noop)["stdout"] == "[{}, null]\n");  // the bridge runs
  pid_t supervisor = TestRoot::json(root.nsbox({"inspect", "--json", attacker}))["supervisor_pid"].get<pid_t>();
  pid_t bridge = bridge_of(supervisor);
  REQUIRE(bridge > 0);
  Memory idle_supervisor = memory_of(supervisor), idle_bridge = memory_of(bridge);

  auto attack = root.start({"sh", attacker, "--timeout", "900", "--", "python3 - <<'EOF'\n" + kAttack + "EOF\n"},
                           {.timeout_s = 900});
  bool attacked_all = attack->wait_for_output("{\"attacked\"", 600);
  INFO(attack->output());
  // 2 million levels of nesting crashed the supervisor (its stack) before depth was bounded.
  REQUIRE(attacked_all);
  json attacked = line_with(attack->output(), "attacked");
  Memory held_supervisor = memory_of(supervisor), held_bridge = memory_of(bridge);
  INFO("supervisor " << idle_supervisor.rss << " -> " << held_supervisor.rss << " (peak " << held_supervisor.peak
                     << "), bridge " << idle_bridge.rss << " -> " << held_bridge.rss << " (peak " << held_bridge.peak << ")");
  REQUIRE(held_supervisor.rss > 0);
  REQUIRE(held_bridge.rss > 0);
  // The byte budget: a few of the 4 MiB calls wait in the bridge, the rest are refused at
  // once with the limit named; the frames over the parse limits and the unfinished ones
  // were read (or refused) and cost no more than the documented bound. Before, 8 frames
  // of [[],[],...] took the bridge from 12.7 to 581 MB and the supervisor to 306 MB.
  CHECK(attacked["taken"].get<int>() >= 1);
  CHECK(attacked["taken"].get<int>() <= 4);
  REQUIRE(attacked["refused"].size() >= 1);
  for (const auto& e : attacked["refused"]) CHECK(e.get<std::string>().find("16 MiB") != std::string::npos);
  CHECK(attacked["shaped_seen"] == 5);
  CHECK(attacked["unfinished_read"].get<int>() <= 2);  // 8 MiB of unfinished frames, at most
  CHECK(held_supervisor.peak + held_bridge.peak < host_memory_bound(96u << 20));

  // Another sandbox's calls go on meanwhile.
  CHECK(root.cell(neighbour, noop)["stdout"] == "[{}, null]\n");

  std::ofstream(tools.path() + "/SLOW.release") << "";
  auto done = attack->wait(900);
  INFO(done.out << done.err);
  REQUIRE(done.exit_code == 0);
  json answered = line_with(done.out, "answered");
  CHECK(answered["answered"] == answered["of"]);  // every call taken was answered
  // The memory comes back after the burst (malloc_trim), read until it has, or the bound.
  Memory after_bridge, after_supervisor;
  for (int i = 0; i < 100; ++i) {
    after_bridge = memory_of(bridge);
    after_supervisor = memory_of(supervisor);
    if (after_bridge.rss < idle_bridge.rss + (16u << 20) && after_supervisor.rss < idle_supervisor.rss + (16u << 20)) break;
    ::usleep(100'000);
  }
  INFO("after: supervisor " << after_supervisor.rss << ", bridge " << after_bridge.rss);
  CHECK(after_bridge.rss < host_memory_bound(idle_bridge.rss + (16u << 20)));
  CHECK(after_supervisor.rss < host_memory_bound(idle_supervisor.rss + (16u << 20)));
  CHECK(root.cell(attacker, noop)["stdout"] == "[{}, null]\n");
}

TEST_CASE("a helper call over a tool call's limits is answered with an error naming the limit, from a cell and from a script", "[tools]") {
  TempDir tools("nsbox-tools");
  std::ofstream(tools.path() + "/NOOP") << "#!/bin/sh\ncat >/dev/null\necho '{}'\n";
  ::chmod((tools.path() + "/NOOP").c_str(), 0755);
  TestRoot root;
  auto id = root.create({"--tools-dir", tools.path()});
  const std::string calls = R"PY(import json
from nsbox_helpers import run_tool
deep = []
for _ in range(100): deep = [deep]
print(json.dumps([run_tool("NOOP", {"a": [[] for _ in range(70000)]})[1], run_tool("NOOP", {"a": deep})[1],
                  run_tool("NOOP", {"a": "x" * (5 << 20)})[1], run_tool("NOOP", {"a": [[]] * 1000})]))
)PY";
  auto check = [](const json& got) {
    INFO(got.dump());
    REQUIRE(got.size() == 4);
    CHECK(got[0].get<std::string>().find("65536 values") != std::string::npos);
    CHECK(got[1].get<std::string>().find("64 levels") != std::string::npos);
    CHECK(got[2].get<std::string>().find("4 MiB") != std::string::npos);
    CHECK(got[3] == json::array({json::object(), nullptr}));  // under the limits: answered
  };
  auto cell = root.cell(id, calls);
  INFO(cell.dump());
  REQUIRE(cell["status"] == "ok");
  check(json::parse(cell["stdout"].get<std::string>()));
  auto script = root.sh(id, "python3 - <<'EOF'\n" + calls + "EOF\n", {"--timeout", "120"});
  INFO(script.err);
  REQUIRE(script.exit_code == 0);
  check(json::parse(script.out));
}

// What comes back is bounded too: a tool (or a remote) answering a million nested arrays
// once crashed whoever copied or wrote the answer out (the bridge, then the supervisor,
// whose sandbox died with it). It is refused with the limit named, and the sandbox goes on.
TEST_CASE("a tool's answer nested a million deep or holding a million values is refused, and the sandbox goes on", "[tools]") {
  TempDir tools("nsbox-tools");
  std::ofstream(tools.path() + "/DEEP") << "#!/usr/bin/python3.11\nimport sys\nsys.stdin.read()\n"
                                           "sys.stdout.write('[' * 1000000 + ']' * 1000000)\n";
  std::ofstream(tools.path() + "/WIDE") << "#!/usr/bin/python3.11\nimport sys\nsys.stdin.read()\n"
                                           "sys.stdout.write('[' + ','.join(['0'] * 1000000) + ']')\n";
  std::ofstream(tools.path() + "/FINE") << "#!/bin/sh\ncat >/dev/null\necho '[[[1]]]'\n";
  for (const char* t : {"/DEEP", "/WIDE", "/FINE"}) ::chmod((tools.path() + t).c_str(), 0755);
  TestRoot root;
  auto id = root.create({"--tools-dir", tools.path()});
  auto cell = root.cell(id, "import json\nprint(json.dumps([run_tool('DEEP', {})[1], run_tool('WIDE', {})[1], run_tool('FINE', {})]))");
  INFO(cell.dump());
  REQUIRE(cell["status"] == "ok");
  auto got = json::parse(cell["stdout"].get<std::string>());
  CHECK(got[0].get<std::string>().find("DEEP: the tool's output nests deeper than 256 levels") != std::string::npos);
  CHECK(got[1].get<std::string>().find("WIDE: the tool's output holds more than 524288 values") != std::string::npos);
  CHECK(got[2] == json::array({json::array({json::array({json::array({1})})}), nullptr}));
  CHECK(root.cell(id, "1 + 1")["results"] == "2");  // the same kernel, the same supervisor
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}
