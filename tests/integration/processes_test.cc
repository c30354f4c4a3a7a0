// Processes that outlive a request (docs/semantics.md, "Processes") through the command
// line: each nsbox invocation is a client that starts, reads or signals and leaves; the
// process runs on in the sandbox, named by its pid, its output read from offsets.
#include <catch2/catch.hpp>
#include <string>

#include "tests/support/nsbox_cli.h"

using namespace nsbox::test;
using nlohmann::json;

namespace {

std::string spawn(const TestRoot& root, const std::string& id, const std::vector<std::string>& command,
                  const std::vector<std::string>& flags = {}) {
  return root.start_command({"spawn", id}, flags, command);
}

json process(const TestRoot& root, const std::string& id, const std::string& pid) {
  auto r = root.nsbox({"ps", id, "--json"});
  REQUIRE(r.exit_code == 0);
  json all = TestRoot::json(r);  // kept: a loop over a temporary's member would outlive it
  for (const auto& p : all["processes"])
    if (std::to_string(p["pid"].get<int64_t>()) == pid) return p;
  return json();
}

}  // namespace

TEST_CASE("a spawned process outlives the command that started it and keeps its exit code until removed", "[processes]") {
  TestRoot root;
  auto id = root.create();
  auto pid = spawn(root, id, {"sleep 1; pwd; echo oops >&2; exit 5"}, {"--cwd", "/tmp"});
  CHECK(std::stoll(pid) > 1);
  auto running = process(root, id, pid);
  CHECK(running["status"] == "running");  // `spawn` has exited; the process has not
  CHECK(running["cwd"] == "/tmp");

  // `logs --follow` waits for the end; its exit status is the process's.
  auto logs = root.nsbox({"logs", id, pid, "--follow"});
  CHECK(logs.exit_code == 5);
  CHECK(logs.out == "/tmp\n");
  CHECK(logs.err.find("oops") != std::string::npos);
  for (int i = 0; i < 2; ++i) {  // read again: the status stays
    auto p = process(root, id, pid);
    CHECK(p["status"] == "exited");
    CHECK(p["exit_code"] == 5);
  }
}

TEST_CASE("a process's signal, output from an offset, and removal", "[processes]") {
  TestRoot root;
  auto id = root.create();
  auto pid = spawn(root, id, {"bash", "-c", "echo first; echo second; exec sleep 600"});
  std::string out;
  for (int i = 0; i < 50 && out.find("second") == std::string::npos; ++i) out = root.nsbox({"logs", id, pid}).out;
  CHECK(out == "first\nsecond\n");
  CHECK(root.nsbox({"logs", id, pid, "--offset", "6"}).out == "second\n");

  auto bad = root.nsbox({"kill", id, pid, "NOPE"});
  CHECK(bad.exit_code != 0);
  CHECK(bad.err.find("not a signal") != std::string::npos);
  REQUIRE(root.nsbox({"kill", id, pid, "TERM"}).exit_code == 0);
  auto ended = root.nsbox({"logs", id, pid, "--follow"});
  CHECK(ended.exit_code == 128 + 15);
  auto p = process(root, id, pid);
  CHECK(p["status"] == "exited");
  CHECK(p["signal"] == "TERM");

  REQUIRE(root.nsbox({"kill", id, pid}).exit_code == 0);  // no signal: removed
  CHECK(process(root, id, pid).is_null());
  auto gone = root.nsbox({"logs", id, pid});
  CHECK(gone.exit_code != 0);
  CHECK(gone.err.find("no process " + pid) != std::string::npos);
}
