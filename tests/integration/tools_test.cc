// The tool bridge end to end (docs/tools.md): helpers called in real sandboxes, answered
// by a real HTTP server on loopback (tests/peers/fake_tools_remote.py: a Composio-style
// tool service and an OpenAI-style chat endpoint that record what they were sent), by a
// tools directory, and by a recording.
#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>
#include <utility>
#include <vector>

#include "tests/support/host_features.h"
#include "tests/support/nsbox_cli.h"
#include "tests/support/temp_dir.h"

using namespace nsbox::test;
using nlohmann::json;

namespace {

const std::string kKey = "ck-test-5b1e0c9d77f24a3e";     // distinctive: searched for in the key scan
const std::string kLlmKey = "sk-test-e41f0a77c2d95b68";

// The fake remote, on a port of its own, for one test.
class FakeRemote {
 public:
  FakeRemote()
      : process_({"/usr/bin/python3.11", std::string(NSBOX_SOURCE_DIR) + "/tests/peers/fake_tools_remote.py", "--key", kKey,
                  "--llm-key", kLlmKey},
                 {.stdin_is_null = false}) {
    REQUIRE(process_.wait_for_output("\"port\"", 30));
    std::string out = process_.output();
    size_t at = out.find("{\"port\"");
    port_ = json::parse(out.substr(at, out.find('\n', at) - at)).at("port").get<int>();
  }
  std::string url(const std::string& path = "") const { return "http://127.0.0.1:" + std::to_string(port_) + path; }
  // The environment `nsbox create` finds the remote's key and address in.
  ProcessOptions env() const {
    return {.extra_env = {"COMPOSIO_API_KEY=" + kKey, "COMPOSIO_BASE_URL=" + url(), "NSBOX_LLM_API_KEY=" + kLlmKey}};
  }
  std::vector<std::string> flags() const { return {"--tools", "composio", "--user-id", "u-42", "--llm-url", url("/v1")}; }
  json stats() const {
    auto r = run_process({"/usr/bin/python3.11", "-c",
                          "import sys, urllib.request as u\n"
                          "print(u.build_opener(u.ProxyHandler({})).open(sys.argv[1], timeout=30).read().decode())",
                          url("/_stats")});
    REQUIRE(r.exit_code == 0);
    return json::parse(r.out);
  }
  void stop() { process_.close_stdin(); (void)process_.wait(30); }

 private:
  BackgroundProcess process_;
  int port_ = 0;
};

// A cell whose last line prints JSON: its stdout, parsed.
json cell_json(const TestRoot& root, const std::string& id, const std::string& code, const std::vector<std::string>& flags = {}) {
  auto r = root.cell(id, code, flags);
  INFO(r.dump());
  REQUIRE(r["status"] == "ok");
  return json::parse(r["stdout"].get<std::string>());
}

// A directory of tools (executables) removed with the object.
class ToolsDir {
 public:
  void add(const std::string& name, const std::string& script) {
    std::string p = path() + "/" + name;
    std::ofstream(p) << script;
    ::chmod(p.c_str(), 0755);
  }
  const std::string& path() const { return dir_.path(); }

 private:
  TempDir dir_{"nsbox-tools"};
};

}  // namespace

TEST_CASE("run_composio_tool reaches a Composio-style remote with the key added outside, each answer becomes a tuple, a 429 is retried, a 500 is not", "[tools][zygote]") {
  FakeRemote remote;
  TestRoot root;
  auto id = root.create(remote.flags(), remote.env());
  auto got = cell_json(root, id, R"PY(import json
out = {}
for slug, args in [("ECHO", {"message": "hi"}), ("FAIL", {}), ("INPUT_REQUIRED", {}), ("RATE_LIMITED_ONCE", {"token": "t1"}),
                   ("SERVER_ERROR", {}), ("NO_SUCH_TOOL", {})]:
    out[slug] = run_composio_tool(slug, args)
out["web_search"] = web_search("nsbox")
out["proxy"] = proxy_execute("/user/repos", "GET", connected_account_id="ca_1")
print(json.dumps(out))
)PY");
  CHECK(got["ECHO"][0]["arguments"] == json{{"message", "hi"}});
  CHECK(got["ECHO"][0]["user_id"] == "u-42");
  CHECK(got["ECHO"][1].is_null());
  CHECK(got["FAIL"] == json::array({nullptr, "the tool failed: bad input"}));
  CHECK(got["INPUT_REQUIRED"][0].is_null());
  CHECK(got["INPUT_REQUIRED"][1].get<std::string>().find("needs input or an approval") != std::string::npos);
  CHECK(got["RATE_LIMITED_ONCE"][0]["arguments"]["token"] == "t1");  // the retry succeeded
  CHECK(got["SERVER_ERROR"][0].is_null());
  CHECK(got["SERVER_ERROR"][1].get<std::string>().find("HTTP 500: internal error") != std::string::npos);
  CHECK(got["NO_SUCH_TOOL"][1].get<std::string>().find("HTTP 404") != std::string::npos);
  CHECK(got["web_search"][0]["arguments"] == json{{"query", "nsbox"}});
  CHECK(got["proxy"][0]["arguments"]["endpoint"] == "/user/repos");
  CHECK(got["proxy"][0]["arguments"]["connected_account_id"] == "ca_1");

  json stats = remote.stats();
  CHECK(stats["counts"]["RATE_LIMITED_ONCE"] == 2);  // one 429, one retry
  CHECK(stats["counts"]["SERVER_ERROR"] == 1);       // never retried: a tool call is not idempotent
  for (const auto& r : stats["requests"]) CHECK(r["api_key_ok"] == true);
}

TEST_CASE("a wrong key is the remote's refusal, said without the key", "[tools][zygote]") {
  FakeRemote remote;
  TestRoot root;
  ProcessOptions env = remote.env();
  env.extra_env[0] = "COMPOSIO_API_KEY=ck-wrong-key-0000";
  auto id = root.create(remote.flags(), env);
  auto got = cell_json(root, id, "import json; print(json.dumps(run_composio_tool('ECHO', {})))");
  CHECK(got[0].is_null());
  CHECK(got[1].get<std::string>().find("refused the API key (HTTP 401)") != std::string::npos);
  CHECK(got[1].get<std::string>().find("ck-wrong") == std::string::npos);
}

TEST_CASE("100 tool calls from 10 threads run concurrently, not one after another", "[tools][zygote]") {
  FakeRemote remote;
  TestRoot root;
  auto id = root.create(remote.flags(), remote.env());
  auto got = cell_json(root, id, R"PY(import json
from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor(max_workers=10) as pool:
    results = list(pool.map(lambda i: run_composio_tool("SLOW", {"ms": 200, "i": i}), range(100)))
print(json.dumps({"ok": sum(1 for r, e in results if e is None), "order": [r["arguments"]["i"] for r, e in results]}))
)PY");
  CHECK(got["ok"] == 100);
  CHECK(got["order"][99] == 99);
  // How many calls the remote served at once on average: the time its calls took, over
  // the time in which any was served (the union of their intervals). One after another,
  // that is 1 whatever the host's load; ten threads give close to 10. A peak count
  // (once: at least 8 at some moment) failed on a loaded host, where one thread's call
  // could end before a late thread's was sent.
  auto calls = remote.stats()["slow_calls"].get<std::vector<std::pair<double, double>>>();
  REQUIRE(calls.size() == 100);
  std::sort(calls.begin(), calls.end());
  double busy = 0, covered = 0, reach = calls.front().first;
  for (auto [start, end] : calls) {
    busy += end - start;
    covered += std::max(0.0, end - std::max(start, reach));
    reach = std::max(reach, end);
  }
  double at_once = busy / covered;
  INFO("the remote served " << at_once << " calls at once on average");
  CHECK(at_once >= 4);
}

TEST_CASE("a helper called between cells by a thread a cell left running is answered, and the kernel has no reader thread until a first call", "[tools][zygote]") {
  FakeRemote remote;
  TestRoot root;
  auto id = root.create(remote.flags(), remote.env());
  // Between cells the main thread reads the kernel's channel itself (kernel/python/
  // nsbox_kernel/channel.py): it must route a reply to a call made meanwhile.
  CHECK(cell_json(root, id, "import json, threading; print(json.dumps(threading.active_count()))") == 1);
  auto r = root.cell(id, R"PY(import threading, time
box = {}
def later():
    time.sleep(0.5)  # the cell has ended by then: the kernel waits for the next one
    box["between"] = run_composio_tool("ECHO", {"message": "between"})
caller = threading.Thread(target=later)
caller.start()
)PY");
  REQUIRE(r["status"] == "ok");
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  auto got = cell_json(root, id, R"PY(import json
caller.join(30)
now = run_composio_tool("ECHO", {"message": "during"})
print(json.dumps({"between": box.get("between"), "during": now, "threads": threading.active_count()}))
)PY");
  CHECK(got["between"][0]["arguments"] == json{{"message", "between"}});
  CHECK(got["between"][1].is_null());
  CHECK(got["during"][0]["arguments"] == json{{"message", "during"}});
  CHECK(got["threads"] == 2);  // the main thread and the reader started by the first call
}

TEST_CASE("a helper called in a process the cell forked is refused at once, and the kernel's own calls go on", "[tools][zygote]") {
  FakeRemote remote;
  TestRoot root;
  auto id = root.create(remote.flags(), remote.env());
  auto got = cell_json(root, id, R"PY(import json, os
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(w, json.dumps(run_composio_tool("ECHO", {"message": "child"})).encode())
    os._exit(0)
os.close(w)
os.waitpid(pid, 0)
child = json.loads(os.read(r, 1 << 16))
print(json.dumps({"child": child, "parent": run_composio_tool("ECHO", {"message": "parent"})}))
)PY");
  CHECK(got["child"][0].is_null());
  CHECK(got["child"][1].get<std::string>().find("a process the cell forked") != std::string::npos);
  CHECK(got["parent"][0]["arguments"] == json{{"message", "parent"}});
}

TEST_CASE("invoke_llm asks an OpenAI-style endpoint with the key added outside, and its failure is a tuple", "[tools][zygote]") {
  FakeRemote remote;
  TestRoot root;
  auto id = root.create(remote.flags(), remote.env());
  auto got = cell_json(root, id, R"PY(import json
print(json.dumps([invoke_llm("hello"), invoke_llm(messages=[{"role": "user", "content": "two"}], model="m", max_tokens=5),
                  invoke_llm("fail")]))
)PY");
  CHECK(got[0] == json::array({"echo: hello", nullptr}));
  CHECK(got[1] == json::array({"echo: two", nullptr}));
  CHECK(got[2][0].is_null());
  CHECK(got[2][1].get<std::string>().find("HTTP 500: model overloaded") != std::string::npos);
  for (const auto& r : remote.stats()["requests"])
    if (r["path"] == "/v1/chat/completions") CHECK(r["authorization_ok"] == true);
}

TEST_CASE("meta-tools are refused, and a result read in the wrong case style finds the real key, and arguments are corrected from the schema", "[tools][zygote]") {
  FakeRemote remote;
  TestRoot root;
  auto id = root.create(remote.flags(), remote.env());
  auto r = root.cell(id, R"PY(import json
meta = run_composio_tool("COMPOSIO_REMOTE_WORKBENCH", {"code_to_execute": "1"})
cfg, err = run_composio_tool("GET_CONFIG", {})
echo, _ = run_composio_tool("ECHO", {"repo_name": "nsbox"})
print(json.dumps({"meta": meta, "key": cfg["apiKey"], "nested": cfg["nested"]["createdAt"],
                  "item": cfg["nested"]["items"][0]["displayName"], "plain": json.loads(json.dumps(cfg)) == cfg,
                  "sent": echo["arguments"]}))
)PY");
  REQUIRE(r["status"] == "ok");
  auto got = json::parse(r["stdout"].get<std::string>());
  CHECK(got["meta"][0].is_null());
  CHECK(got["meta"][1].get<std::string>().find("meta-tool") != std::string::npos);
  CHECK(got["key"] == "k-123");
  CHECK(got["nested"] == 1);
  CHECK(got["item"] == "x");
  CHECK(got["plain"] == true);
  CHECK(got["sent"] == json{{"repoName", "nsbox"}});  // the schema says repoName
  std::string err = r["stderr"];
  CHECK(err.find("no key 'apiKey' in the result; using 'api_key'") != std::string::npos);
  CHECK(err.find("ECHO has no argument 'repo_name'; sent it as 'repoName'") != std::string::npos);
  // The meta-tool never reached the remote.
  CHECK(!remote.stats()["counts"].contains("COMPOSIO_REMOTE_WORKBENCH"));
}

TEST_CASE("a tools directory answers offline: JSON in, JSON out, and a failing tool's stderr and a non-JSON answer are errors", "[tools][zygote]") {
  ToolsDir tools;
  tools.add("ADD", "#!/usr/bin/python3.11\nimport json, sys\na = json.load(sys.stdin)\nprint(json.dumps({'sum': a['x'] + a['y']}))\n");
  tools.add("BROKEN", "#!/bin/sh\necho 'no token for the API' >&2\nexit 3\n");
  tools.add("CHATTY", "#!/bin/sh\necho hello\n");
  tools.add("invoke_llm", "#!/usr/bin/python3.11\nimport json, sys\nprint(json.dumps('offline: ' + json.load(sys.stdin)['query']))\n");
  std::ofstream(tools.path() + "/NOT_EXECUTABLE") << "#!/bin/sh\necho {}\n";
  TestRoot root;
  auto id = root.create({"--tools-dir", tools.path()});
  auto got = cell_json(root, id, R"PY(import json
print(json.dumps([run_tool("ADD", {"x": 2, "y": 3}), run_tool("BROKEN", {}), run_tool("CHATTY", {}),
                  run_tool("NOT_EXECUTABLE", {}), run_tool("../ADD", {}), invoke_llm("q")]))
)PY");
  CHECK(got[0] == json::array({json{{"sum", 5}}, nullptr}));
  CHECK(got[1][1].get<std::string>().find("exited with status 3: no token for the API") != std::string::npos);
  CHECK(got[2][1].get<std::string>().find("not JSON: hello") != std::string::npos);
  CHECK(got[3][1].get<std::string>().find("no such tool") != std::string::npos);
  CHECK(got[4][1].get<std::string>().find("no such tool") != std::string::npos);
  CHECK(got[5] == json::array({"offline: q", nullptr}));
}

TEST_CASE("calls recorded against the remote replay with the remote gone, and an unrecorded call says so", "[tools][zygote]") {
  TempDir dir;  // holds the recording
  std::string tape = dir.path() + "/calls.jsonl";
  const std::string code = "import json; print(json.dumps([run_tool('ECHO', {'message': 'm', 'n': 1}), invoke_llm('hi'), run_tool('FAIL', {})]))";
  json live;
  {
    FakeRemote remote;
    TestRoot root;
    std::vector<std::string> flags = remote.flags();
    flags.insert(flags.end(), {"--tools-record", tape});
    auto id = root.create(flags, remote.env());
    live = cell_json(root, id, code);
    remote.stop();
  }
  CHECK(live[0][0]["arguments"]["message"] == "m");
  TestRoot root;
  auto id = root.create({"--tools-replay", tape});
  json replayed = cell_json(root, id, code);
  CHECK(replayed == live);
  auto missing = cell_json(root, id, "import json; print(json.dumps(run_tool('ECHO', {'message': 'other'})))");
  CHECK(missing[1].get<std::string>().find("the replay has no recorded answer") != std::string::npos);
}

TEST_CASE("a Python script run through the bash tool imports the helpers and reaches the bridge through its socket", "[tools]") {
  ToolsDir tools;
  tools.add("ECHO", "#!/bin/sh\ncat\n");
  TestRoot root;
  auto id = root.create({"--tools-dir", tools.path()});
  auto r = root.sh(id, "python3 -c 'from nsbox_helpers import run_composio_tool as t; print(t(\"ECHO\", {\"via\": \"socket\"}))'");
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out == "({'via': 'socket'}, None)\n");
  CHECK(root.sh(id, "ls -l /run/nsbox/").out.find("bridge.sock") != std::string::npos);
}

TEST_CASE("calls in flight at a cell's deadline are abandoned and counted, and the cell's state is kept", "[tools][zygote]") {
  FakeRemote remote;
  TestRoot root;
  auto id = root.create(remote.flags(), remote.env());
  auto r = root.cell(id, R"PY(kept = 7
from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor(max_workers=4) as pool:
    results = list(pool.map(lambda i: run_composio_tool("SLOW", {"ms": 30000, "i": i}), range(8)))
)PY",
                     {"--timeout", "1"});
  INFO(r.dump());
  CHECK(r["status"] == "timeout");
  // The 4 in flight at the deadline, and any the pool's threads started before the
  // interrupted map() cancelled the rest (each refused at once, and counted).
  CHECK(r["abandoned_tool_calls"] >= 4);
  CHECK(r["abandoned_tool_calls"] <= 8);
  CHECK(r["state_lost"] == false);
  auto next = root.cell(id, "kept");
  CHECK(next["results"] == "7");
  CHECK(next["abandoned_tool_calls"] == 0);
}

TEST_CASE("garbage and a flood on the bridge socket get errors, and the supervisor, its log and the cell deadline are unaffected", "[tools][zygote]") {
  ToolsDir tools;
  tools.add("NOOP", "#!/bin/sh\necho '{}'\n");
  TestRoot root;
  auto id = root.create({"--tools-dir", tools.path()});
  auto r = root.sh(id, R"PY(python3 - <<'EOF'
import json, socket, struct
def conn():
    s = socket.socket(socket.AF_UNIX); s.connect("/run/nsbox/bridge.sock"); return s
def frame(obj):
    data = json.dumps(obj).encode(); return struct.pack(">I", len(data)) + data
def read_frames(s, n):
    got, buf = [], b""
    s.settimeout(60)
    while len(got) < n:
        chunk = s.recv(1 << 20)
        if not chunk: break
        buf += chunk
        while len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">I", buf[:4])[0]:
            length = struct.unpack(">I", buf[:4])[0]; got.append(json.loads(buf[4:4 + length])); buf = buf[4 + length:]
    return got
# Malformed frames: each answered with an error, then the connection is closed.
s = conn()
s.sendall(b"".join(struct.pack(">I", 5) + b"hello" for _ in range(100)))
bad = read_frames(s, 100)
print("garbage answers", len(bad) < 100, all("malformed" in (f.get("error") or "") for f in bad))
# A length past the limit: closed.
s = conn(); s.sendall(b"\xff\xff\xff\xff"); print("oversized closed", s.recv(10) == b"")
# 10,000 calls on 4 connections as fast as they can be sent.
conns = [conn() for _ in range(4)]
for c in conns:
    c.sendall(b"".join(frame({"call": i + 1, "helper": "run_tool", "args": {"tool": "NOOP"}}) for i in range(2500)))
answers = [f for c in conns for f in read_frames(c, 2500)]
errors = [f["error"] for f in answers if f["error"]]
print("flood", len(answers), len(answers) - len(errors), any("too many" in e for e in errors))
EOF)PY",
                   {"--timeout", "120"});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("garbage answers True True") != std::string::npos);
  CHECK(r.out.find("oversized closed True") != std::string::npos);
  CHECK(r.out.find("flood 10000 ") != std::string::npos);  // every call answered
  CHECK(r.out.find(" True\n", r.out.find("flood")) != std::string::npos);  // some refused as too many
  // Still served, deadlines still fire, and the host-side log stayed small.
  CHECK(cell_json(root, id, "import json; print(json.dumps(run_tool('NOOP', {})))") == json::array({json::object(), nullptr}));
  CHECK(root.cell(id, "while True: pass", {"--timeout", "1"})["status"] == "timeout");
  CHECK(root.logs(id).size() < (256u << 10));
}

TEST_CASE("upload_local_file copies into the files volume and links a host copy, and a symlink out of the sandbox is refused", "[tools][zygote]") {
  TestRoot root;
  auto id = root.create();
  auto got = cell_json(root, id, R"PY(import json, os
open("report.csv", "w").write("a,b\n1,2\n")
os.symlink("/etc/hostname", "/tmp/link")
os.makedirs("/mnt/files/out", exist_ok=True); open("/mnt/files/out/done.txt", "w").write("done")
print(json.dumps([upload_local_file("report.csv"), upload_local_file("/tmp/link"), upload_local_file("/mnt/files/out/done.txt")]))
)PY");
  const json& up = got[0][0];
  REQUIRE(got[0][1].is_null());
  CHECK(up["size"] == 8);
  std::string rel = up["mount_relative_path"];
  CHECK(rel.starts_with(".nsbox/shared/"));
  CHECK(rel.ends_with("/report.csv"));
  CHECK(root.download(id, rel) == "a,b\n1,2\n");
  std::string url = up["url"];
  REQUIRE(url.starts_with("file://"));
  std::ifstream host(url.substr(7));
  CHECK(std::string(std::istreambuf_iterator<char>(host), {}) == "a,b\n1,2\n");
  CHECK(got[1][0].is_null());  // the link is refused, not followed
  CHECK(!got[1][1].get<std::string>().empty());
  CHECK(got[2][0]["mount_relative_path"] == "out/done.txt");  // already in the volume: not copied again
  // The host copies go with the sandbox.
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
  CHECK(!std::filesystem::exists(url.substr(7)));
}

TEST_CASE("smart_file_extract reads PDF (inside the sandbox), text, CSV and JSON, and names what it cannot read", "[tools][zygote]") {
  TestRoot root;
  auto id = root.create();
  auto got = cell_json(root, id, R"PY(import json, shutil
from reportlab.pdfgen import canvas
c = canvas.Canvas("/tmp/doc.pdf"); c.drawString(72, 720, "Quarterly revenue grew"); c.save()
open("/tmp/t.csv", "w").write("a,b\n1,2\n")
open("/tmp/img.png", "wb").write(b"\x89PNG")
print(json.dumps({"pdftotext": shutil.which("pdftotext") is not None, "pdf": smart_file_extract("/tmp/doc.pdf"),
                  "csv": smart_file_extract("/tmp/t.csv"), "png": smart_file_extract("/tmp/img.png"),
                  "missing": smart_file_extract("/tmp/none.txt")}))
)PY");
  CHECK(got["csv"] == json::array({"a,b\n1,2\n", nullptr}));
  CHECK(got["png"][1].get<std::string>().find("img.png is not PDF, text, CSV or JSON") != std::string::npos);
  CHECK(got["png"][1].get<std::string>().find("extract_tool") != std::string::npos);
  CHECK(got["missing"][1].get<std::string>().find("No such file") != std::string::npos);
  if (got["pdftotext"] == true) {
    CHECK(got["pdf"][0].get<std::string>().find("Quarterly revenue grew") != std::string::npos);
  } else {
    CHECK(got["pdf"][1].get<std::string>().find("poppler-utils") != std::string::npos);
    NSBOX_NEEDS(installed("/usr/bin/pdftotext", "poppler-utils"));  // the PDF's text was not checked
  }
}

TEST_CASE("smart_file_extract sends what the sandbox cannot read to the remote's extract_tool or a tools directory's extractor, up to 2 MiB", "[tools][zygote]") {
  const std::string code = R"PY(import json
open("/tmp/img.png", "wb").write(b"\x89PNG" + bytes((2 << 20) - 4))  # at the limit
open("/tmp/big.docx", "wb").write(bytes(3 << 20))
print(json.dumps({"png": smart_file_extract("/tmp/img.png"), "big": smart_file_extract("/tmp/big.docx")}))
)PY";
  SECTION("a Composio-style remote's tool, named by extract_tool in the tools config") {
    FakeRemote remote;
    TempDir dir;  // holds the config file
    std::string path = dir.path() + "/tools.json";
    std::ofstream(path) << json{{"backend", "composio"}, {"base_url", remote.url()}, {"extract_tool", "EXTRACT_TEXT"},
                                {"composio_api_key", kKey}}.dump();
    ::chmod(path.c_str(), 0600);
    TestRoot root;
    auto got = cell_json(root, root.create({"--tools-config", path}), code);
    CHECK(got["png"] == json::array({"img.png (image/png, 2097152 bytes)", nullptr}));
    CHECK(got["big"][1].get<std::string>().find("at most 2 MiB") != std::string::npos);
    auto requests = remote.stats()["requests"];
    REQUIRE(requests.size() == 1);  // the big file never left the sandbox
    CHECK(requests[0]["slug"] == "EXTRACT_TEXT");
  }
  SECTION("an executable smart_file_extract in the tools directory") {
    ToolsDir tools;
    tools.add("smart_file_extract", "#!/usr/bin/python3.11\nimport base64, json, sys\na = json.load(sys.stdin)\n"
                                    "print(json.dumps('%s: %d bytes' % (a['name'], len(base64.b64decode(a['content_base64'])))))\n");
    TestRoot root;
    auto got = cell_json(root, root.create({"--tools-dir", tools.path()}), code);
    CHECK(got["png"] == json::array({"img.png: 2097152 bytes", nullptr}));
  }
}

TEST_CASE("no key is anywhere a sandbox can read: environments, command lines, files, the helpers' globals, a caller's memory", "[tools][zygote]") {
  FakeRemote remote;
  TestRoot root;
  auto id = root.create(remote.flags(), remote.env());
  // The keys reach the scan as hex: the scanner's own source and memory never hold them.
  auto hex = [](const std::string& s) {
    static const char d[] = "0123456789abcdef";
    std::string h;
    for (unsigned char c : s) h += {d[c >> 4], d[c & 15]};
    return h;
  };
  auto r = root.cell(id, "KEYS_HEX = ['" + hex(kKey) + "', '" + hex(kLlmKey) + "']\n" + R"PY(import json, os, re, signal, subprocess, sys
keys = [bytes.fromhex(h) for h in KEYS_HEX]
calls = [run_composio_tool("ECHO", {}), invoke_llm("x"), run_composio_tool("NOPE", {})]
found, scanned = [], {"files": 0, "procs": 0, "memory_bytes": 0}
def check(where, data):
    for k in keys:
        if k in data: found.append(where)
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    for name in ("environ", "cmdline"):
        try: check(f"/proc/{pid}/{name}", open(f"/proc/{pid}/{name}", "rb").read()); scanned["procs"] += 1; scanned[pid] = True
        except OSError: pass
for top in ("/home", "/tmp", "/mnt/files", "/run", "/etc", "/opt/nsbox", "/dev/shm"):
    for d, _, files in os.walk(top):
        for f in files:
            p = os.path.join(d, f)
            try:
                if os.path.isfile(p) and os.path.getsize(p) < (16 << 20): check(p, open(p, "rb").read()); scanned["files"] += 1
            except OSError: pass
import nsbox_helpers, nsbox_helpers.transport
check("helper globals", repr([vars(nsbox_helpers), vars(nsbox_helpers.transport), globals().get("calls")]).encode())
# A process that called the bridge through its socket, stopped, its memory read whole.
child = subprocess.Popen([sys.executable, "-c", "import os, signal; from nsbox_helpers import run_tool, invoke_llm; "
                          "r = [run_tool('ECHO', {}), invoke_llm('y')]; os.kill(os.getpid(), signal.SIGSTOP)"])
for _ in range(600):
    if open(f"/proc/{child.pid}/stat").read().split(")")[1].split()[0] == "T": break
    import time; time.sleep(0.05)
try:
    with open(f"/proc/{child.pid}/maps") as maps, open(f"/proc/{child.pid}/mem", "rb", 0) as mem:
        for line in maps:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if "r" not in line.split()[1] or hi - lo > (256 << 20): continue
            try: mem.seek(lo); data = mem.read(hi - lo); check(f"memory {line.split()[0]}", data); scanned["memory_bytes"] += len(data)
            except OSError: pass
except OSError as e:
    scanned["memory_error"] = str(e)
child.kill(); child.wait()
print(json.dumps({"found": found, "scanned": scanned, "self": str(os.getpid()),
                  "calls_ok": calls[0][1] is None and calls[1][1] is None}))
)PY");
  INFO(r.dump());
  REQUIRE(r["status"] == "ok");
  auto got = json::parse(r["stdout"].get<std::string>());
  CHECK(got["calls_ok"] == true);  // the keys worked
  CHECK(got["found"] == json::array());
  CHECK(got["scanned"]["procs"].get<int>() >= 2);
  CHECK(got["scanned"].contains(got["self"].get<std::string>()));  // the kernel's own environment and command line
  CHECK(got["scanned"]["files"].get<int>() >= 5);
  CHECK(got["scanned"]["memory_bytes"].get<int64_t>() > (1 << 20));  // the whole process was read
  // Nor on the host side in what nsbox writes: state, logs.
  std::string state_dir = root.path() + "/run/sandboxes/" + id;
  std::ifstream state(state_dir + "/state.json");
  std::string saved(std::istreambuf_iterator<char>(state), {});
  for (const std::string& k : {kKey, kLlmKey}) {
    CHECK(saved.find(k) == std::string::npos);
    CHECK(root.logs(id).find(k) == std::string::npos);
  }
}

TEST_CASE("the workbench tool shapes answer with the hosted field names, and long output spills to .composio/output", "[tools]") {
  TestRoot root;
  auto id = root.create();
  auto call = [&](const std::string& tool, const json& input) {
    auto r = root.nsbox({"workbench", id, "--tool", tool, "--input", input.dump()});
    INFO(r.out << r.err);
    REQUIRE(!r.out.empty());
    return std::pair{r, json::parse(r.out)};
  };
  auto [cell_run, cell] = call("COMPOSIO_REMOTE_WORKBENCH", {{"code_to_execute", "x = 41\nprint('a' * 100000)\nx + 1"},
                                                              {"thought", "a test"}, {"current_step", "COUNTING"},
                                                              {"current_step_metric", "1/2"}, {"session_id", "s-1"}});
  CHECK(cell_run.exit_code == 0);
  CHECK(cell["successful"] == true);
  CHECK(cell["error"].is_null());
  const json& d = cell["data"];
  CHECK(d["results"] == "42");
  CHECK(d["stdout"].get<std::string>().size() < 100001);  // cut inline...
  REQUIRE(d["stdout_file_path"].is_string());             // ...and whole in the hosted place
  std::string spilled = d["stdout_file_path"];
  CHECK(spilled.starts_with("/mnt/files/.composio/output/"));
  CHECK(root.download(id, spilled).size() == 100001);
  CHECK(d["stderr"] == "");
  CHECK(d["error"].is_null());
  CHECK(d["results_file_path"].is_null());
  CHECK(d["stderr_file_path"].is_null());
  CHECK(d["session"]["id"] == "s-1");
  CHECK(cell_run.err.find("[COUNTING] 1/2") != std::string::npos);  // reported as progress

  auto [err_run, err] = call("COMPOSIO_REMOTE_WORKBENCH", {{"code_to_execute", "x / 0"}});
  CHECK(err_run.exit_code == 1);
  CHECK(err["successful"] == false);
  CHECK(err["data"]["error"].get<std::string>().find("ZeroDivisionError") != std::string::npos);
  CHECK(err["error"] == err["data"]["error"]);

  auto [bash_run, bash] = call("COMPOSIO_REMOTE_BASH_TOOL", {{"command", "pwd; seq 1 30000; echo oops >&2; exit 3"}});
  CHECK(bash_run.exit_code == 1);
  CHECK(bash["successful"] == false);
  const json& b = bash["data"];
  CHECK(b["stdout"].get<std::string>().starts_with("/home/user\n1\n2\n"));
  CHECK(b["stdoutLines"] == 30001);
  CHECK(b["stderrLines"] == 1);
  CHECK(b["stderr"] == "oops\n");
  CHECK(b["exit_code"] == 3);
  CHECK(b["error"].get<std::string>().find("status 3") != std::string::npos);
  REQUIRE(b["stdout_file_path"].is_string());
  CHECK(b["stdout_file_path"].get<std::string>().starts_with("/mnt/files/.composio/output/"));
  CHECK(b["stderr_file_path"].is_null());

  // Bad input runs nothing and says what is wrong.
  auto bad = root.nsbox({"workbench", id, "--tool", "COMPOSIO_REMOTE_WORKBENCH", "--input", R"({"code": "1"})"});
  CHECK(bad.exit_code != 0);
  CHECK(bad.err.find("unknown field \"code\"") != std::string::npos);
  auto unknown = root.nsbox({"workbench", id, "--tool", "COMPOSIO_SEARCH", "--input", "{}"});
  CHECK(unknown.err.find("no workbench tool") != std::string::npos);
}

TEST_CASE("the workbench tools' schemas teach the rules, for OpenAI and Anthropic", "[tools]") {
  TestRoot root;
  for (const char* format : {"openai", "anthropic"}) {
    auto r = root.nsbox({"tools", "schema", "--format", format});
    REQUIRE(r.exit_code == 0);
    json s = json::parse(r.out);
    REQUIRE(s.size() == 2);
    json first = std::string(format) == "openai" ? s[0]["function"] : s[0];
    CHECK(first["name"] == "COMPOSIO_REMOTE_WORKBENCH");
    std::string description = first["description"];
    for (const char* rule : {"180 seconds", "ThreadPoolExecutor", "/mnt/files", "expression", "small steps"})
      CHECK(description.find(rule) != std::string::npos);
    json params = std::string(format) == "openai" ? first["parameters"] : first["input_schema"];
    CHECK(params["required"] == json::array({"code_to_execute"}));
  }
  CHECK(root.nsbox({"tools", "schema", "--format", "xml"}).exit_code != 0);
}

TEST_CASE("nsbox tools ls lists a remote's catalogue (the key added outside) or a tools directory's", "[tools]") {
  FakeRemote remote;
  TestRoot root;
  auto r = root.nsbox({"tools", "ls", "--json", "--tools", "composio", "--search", "slow"}, remote.env());
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  json listed = json::parse(r.out)["tools"];
  REQUIRE(listed.size() == 1);
  CHECK(listed[0]["slug"] == "SLOW");
  ToolsDir tools;
  tools.add("B_TOOL", "#!/bin/sh\necho {}\n");
  tools.add("A_TOOL", "#!/bin/sh\necho {}\n");
  std::ofstream(tools.path() + "/A_TOOL.schema.json") << R"({"description": "the first", "properties": {"x": {"type": "string"}}})";
  auto local = root.nsbox({"tools", "ls", "--tools-dir", tools.path()});
  CHECK(local.out == "A_TOOL  the first\nB_TOOL\n");
  auto none = root.nsbox({"tools", "ls"});
  CHECK(none.exit_code != 0);
}

TEST_CASE("a recording in front of a tools directory answers what it holds, and the directory the rest", "[tools][zygote]") {
  ToolsDir tools;
  tools.add("ECHO", "#!/bin/sh\ncat\n");
  std::ofstream(tools.path() + "/fixed.jsonl")
      << json{{"helper", "invoke_llm"}, {"args", {{"query", "q"}, {"options", json::object()}}}, {"result", "fixed answer"}}.dump()
      << "\n";
  TestRoot root;
  auto id = root.create({"--tools-dir", tools.path(), "--tools-replay", tools.path() + "/fixed.jsonl"});
  auto got = cell_json(root, id, "import json; print(json.dumps([invoke_llm('q'), run_tool('ECHO', {'a': 1}), invoke_llm('other')]))");
  CHECK(got[0] == json::array({"fixed answer", nullptr}));
  CHECK(got[1] == json::array({json{{"a", 1}}, nullptr}));
  CHECK(got[2][1].get<std::string>().find("invoke_llm: not configured") != std::string::npos);
}

TEST_CASE("a tools config file of the user's own (0600) gives defaults and keys, and one others may read is refused", "[tools][zygote]") {
  FakeRemote remote;
  TempDir dir;  // holds the config file
  std::string path = dir.path() + "/tools.json";
  std::ofstream(path) << json{{"backend", "composio"}, {"base_url", remote.url()}, {"user_id", "from-file"},
                              {"composio_api_key", kKey}}.dump();
  TestRoot root;
  ::chmod(path.c_str(), 0644);
  auto refused = root.nsbox({"create", "--tools-config", path});
  CHECK(refused.exit_code != 0);
  CHECK(refused.err.find("chmod 600") != std::string::npos);
  ::chmod(path.c_str(), 0600);
  auto id = root.create({"--tools-config", path, "--user-id", "from-flag"});  // a flag wins over the file
  auto got = cell_json(root, id, "import json; print(json.dumps(run_composio_tool('ECHO', {})))");
  CHECK(got[0]["user_id"] == "from-flag");
  CHECK(remote.stats()["requests"][0]["api_key_ok"] == true);
  // The key is in no saved form of the sandbox.
  std::ifstream state(root.path() + "/run/sandboxes/" + id + "/state.json");
  CHECK(std::string(std::istreambuf_iterator<char>(state), {}).find(kKey) == std::string::npos);
}

TEST_CASE("proxy_execute acts as the configured user only, and a tool slug is only a slug, so neither reaches the remote otherwise", "[tools]") {
  FakeRemote remote;
  TestRoot root;
  auto id = root.create(remote.flags(), remote.env());
  auto got = cell_json(root, id, R"PY(import json
from nsbox_helpers import _call
out = {}
out["victim"] = _call("proxy_execute", {"endpoint": "/user/repos", "method": "GET", "user_id": "bob-victim"})
out["extra"] = _call("proxy_execute", {"endpoint": "/user/repos", "method": "GET", "entity_id": "bob-victim"})
out["method"] = proxy_execute("/user/repos", "TRACE")
out["own"] = _call("proxy_execute", {"endpoint": "/user/repos", "method": "get", "user_id": "u-42"})
for slug in [" COMPOSIO_SEARCH", "..", "../../v1/chat", "github_list_repos", "ECHO/../FAIL", "ECHO\n"]:
    out[slug] = run_composio_tool(slug, {})
print(json.dumps(out))
)PY");
  INFO(got.dump());
  CHECK(got["victim"][0].is_null());
  CHECK(got["victim"][1].get<std::string>().find("cannot be chosen from inside the sandbox") != std::string::npos);
  CHECK(got["extra"][1].get<std::string>().find("unknown field \"entity_id\"") != std::string::npos);
  CHECK(got["method"][1].get<std::string>().find("the method must be one of") != std::string::npos);
  CHECK(got["own"][0]["user_id"] == "u-42");  // the configured user, said again: allowed
  CHECK(got["own"][0]["arguments"]["method"] == "GET");
  for (const char* slug : {" COMPOSIO_SEARCH", "..", "../../v1/chat", "github_list_repos", "ECHO/../FAIL", "ECHO\n"}) {
    INFO(slug);
    CHECK(got[slug][0].is_null());
    CHECK(got[slug][1].get<std::string>().find("not a tool slug") != std::string::npos);
  }
  // The remote saw one request: the allowed proxy call, as the configured user.
  json stats = remote.stats();
  INFO(stats.dump());
  REQUIRE(stats["requests"].size() == 1);
  CHECK(stats["requests"][0]["user_id"] == "u-42");
}
