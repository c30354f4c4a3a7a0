// A sandbox that outlives its processes (docs/semantics.md, "Stop and start"): `nsbox stop`
// ends everything but keeps /home/user (its own volume), /mnt/files and the definition;
// `nsbox start` brings it back with a fresh kernel, taking env values again.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <thread>

#include "isolation/sys/files.h"
#include "tests/support/host_features.h"
#include "tests/support/nsbox_cli.h"

using namespace nsbox::test;
using nlohmann::json;

namespace {

bool process_gone(pid_t pid) {
  auto stat = nsbox::files::read_file("/proc/" + std::to_string(pid) + "/stat");
  return !stat || stat->find(") Z ") != std::string::npos;
}

bool wait_gone(pid_t pid, int timeout_ms = 10000) {
  for (int waited = 0; waited < timeout_ms; waited += 10) {
    if (process_gone(pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

json inspect(const TestRoot& root, const std::string& id) { return TestRoot::json(root.nsbox({"inspect", "--json", id})); }

}  // namespace

TEST_CASE("stop keeps /home/user, /mnt/files and the definition and loses the kernel's state, and start brings a fresh kernel", "[persistence][zygote]") {
  TestRoot root;
  auto id = root.create({"--name", "keeper", "--size", "medium", "--env", "GREETING=hello", "--env", "TOKEN=Secret_t0"});
  REQUIRE(root.sh(id, "echo home > ~/notes.txt && mkdir -p ~/proj && echo f > /mnt/files/kept.txt && "
                      "sleep 1000 > /dev/null 2>&1 &").exit_code == 0);
  REQUIRE(root.cell(id, "x = 41")["status"] == "ok");
  auto before = inspect(root, id);
  pid_t supervisor = before["supervisor_pid"].get<pid_t>();
  pid_t init = before["init_pid"].get<pid_t>();

  auto stopped = root.nsbox({"stop", "--json", id});
  INFO(stopped.err);
  REQUIRE(stopped.exit_code == 0);
  auto said = TestRoot::json(stopped)["stopped"];
  REQUIRE(said.size() == 1);
  CHECK(said[0]["status"] == "stopped");
  CHECK(said[0]["kernel_state_lost"] == true);
  CHECK(wait_gone(supervisor));
  CHECK(wait_gone(init));  // and with it every process of the sandbox (its pid namespace)
  auto after_stop = inspect(root, id);
  CHECK(after_stop["status"] == "stopped");
  CHECK(after_stop["cgroup"]["dirs"].empty());
  CHECK(root.nsbox({"ls"}).out.find("stopped") != std::string::npos);
  auto refused = root.sh(id, "true");
  CHECK(refused.exit_code == 125);
  CHECK(refused.err.find("is stopped") != std::string::npos);
  CHECK(refused.err.find("nsbox start " + id) != std::string::npos);
  // The files API serves a stopped sandbox's files.
  CHECK(root.download(id, "kept.txt") == "f\n");
  CHECK(root.nsbox({"stop", id}).exit_code == 0);  // again: nothing to do

  // Env values were never stored: each must be given again, and the error names them.
  auto no_env = root.nsbox({"start", id});
  CHECK(no_env.exit_code != 0);
  CHECK(no_env.err.find("created with env GREETING, TOKEN") != std::string::npos);
  CHECK(no_env.err.find("Secret_t0") == std::string::npos);
  CHECK(inspect(root, id)["status"] == "stopped");

  auto started = root.nsbox({"start", "--json", "keeper", "--env", "GREETING=again", "--env", "TOKEN=t1"});
  INFO(started.err);
  REQUIRE(started.exit_code == 0);
  auto info = TestRoot::json(started);
  CHECK(info["id"] == id);
  CHECK(info["name"] == "keeper");
  CHECK(info["size"] == "medium");
  CHECK(info["status"] == "running");
  CHECK(info["created_at"] == before["created_at"]);
  CHECK(info["supervisor_pid"] != supervisor);
  CHECK(root.sh(id, "cat ~/notes.txt /mnt/files/kept.txt; test -d ~/proj && echo proj; echo $GREETING; "
                    "pgrep -x sleep || echo no-sleep").out == "home\nf\nproj\nagain\nno-sleep\n");
  auto cell = root.cell(id, "x");
  CHECK(cell["status"] == "error");
  CHECK(cell["error"]["ename"] == "NameError");
  CHECK(root.nsbox({"start", id, "--env", "GREETING=a", "--env", "TOKEN=b"}).err.find("is running") != std::string::npos);
}

TEST_CASE("a sandbox whose supervisor was killed starts again with its files", "[persistence][zygote]") {
  TestRoot root;
  auto id = root.create();
  REQUIRE(root.sh(id, "echo survived > ~/a.txt").exit_code == 0);
  pid_t supervisor = inspect(root, id)["supervisor_pid"].get<pid_t>();
  REQUIRE(::kill(supervisor, SIGKILL) == 0);
  REQUIRE(wait_gone(supervisor));
  CHECK(inspect(root, id)["status"] == "dead");
  auto started = root.nsbox({"start", id});
  INFO(started.err);
  REQUIRE(started.exit_code == 0);
  CHECK(root.sh(id, "cat ~/a.txt").out == "survived\n");
  CHECK(root.cell(id, "1 + 1")["results"] == "2");
}

TEST_CASE("/home/user is a volume of its own size: full gives ENOSPC, and it goes with rm", "[persistence]") {
  TestRoot root;
  auto id = root.create({"--home-size", "32M"});
  auto info = inspect(root, id);
  REQUIRE(info.contains("home"));
  std::string home_path = info["home"]["path"];
  if (info["home"]["kind"] == "image") {
    CHECK(info["home"]["quota_bytes"] == 32u << 20);
    auto full = root.sh(id, "head -c 40M /dev/zero > ~/big; echo rc=$?");
    CHECK(full.out == "rc=1\n");
    CHECK(full.err.find("No space left on device") != std::string::npos);
    CHECK(root.sh(id, "rm ~/big && echo small > ~/s && cat ~/s").out == "small\n");
  } else {
    WARN("no quota on /home/user here (rootless: a directory): " << info["home"].dump());
  }
  // Not part of the files API.
  CHECK(root.nsbox({"files", id, "ls"}).out.find("big") == std::string::npos);
  REQUIRE(std::filesystem::exists(home_path));
  REQUIRE(root.nsbox({"stop", id}).exit_code == 0);
  REQUIRE(root.nsbox({"rm", id}).exit_code == 0);
  CHECK_FALSE(std::filesystem::exists(home_path));
  CHECK_FALSE(std::filesystem::exists(root.path() + "/data/homes/" + id + ".json"));

  auto bad = root.nsbox({"create", "--home-size", "1"});
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("at least 16M") != std::string::npos);
}
