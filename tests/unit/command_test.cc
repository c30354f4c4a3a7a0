#include <signal.h>

#include <catch2/catch.hpp>

#include <algorithm>

#include "runtime/core/command.h"
#include "runtime/core/package_sources.h"

using namespace nsbox;

TEST_CASE("a command's end is reported as a shell would, with the reason spelled out") {
  Limits l = limits_for(SizeTier::kStandard);
  auto r = classify({0, {}, {}, false, false, {}}, "true", l, "standard", 180);
  CHECK(r.status == "ok");
  CHECK(r.exit_code == 0);

  r = classify({3, {}, {}, false, false, {}}, "false", l, "standard", 180);
  CHECK(r.status == "error");
  CHECK(r.reason == "exit");
  CHECK(r.exit_code == 3);

  r = classify({{}, {}, ENOENT, false, false, {}}, "nosuch", l, "standard", 180);
  CHECK(r.exit_code == 127);
  CHECK(r.reason == "not_found");
  CHECK(r.message == "command not found in the sandbox: nosuch");

  r = classify({{}, {}, EACCES, false, false, {}}, "/etc/passwd", l, "standard", 180);
  CHECK(r.exit_code == 126);

  r = classify({{}, SIGKILL, {}, true, false, {}}, "sleep", l, "standard", 2.5);
  CHECK(r.status == "timeout");
  CHECK(r.exit_code == 124);
  CHECK(r.message == "timed out after 2.5 s; its process group was killed");

  r = classify({{}, SIGKILL, {}, false, true, {}}, "python3", l, "standard", 180);
  CHECK(r.status == "killed");
  CHECK(r.reason == "oom");
  CHECK(r.exit_code == 137);
  CHECK(r.message == "killed by the OOM killer: the sandbox's memory limit is 1 GiB (size standard)");

  r = classify({{}, SIGKILL, {}, false, false, {"getpid (i386 ABI, number 20) (pid 7 in the sandbox)"}}, "probe", l, "standard", 180);
  CHECK(r.reason == "seccomp");
  CHECK(r.message.find("getpid (i386 ABI") != std::string::npos);

  r = classify({{}, SIGSEGV, {}, false, false, {}}, "crash", l, "standard", 180);
  CHECK(r.reason == "signal");
  CHECK(r.message == "killed by signal 11 (SIGSEGV)");
}

TEST_CASE("commands get a login environment, then the sandbox's, then their own") {
  auto env = command_environment({{"FOO", "sandbox"}, {"PATH", "/opt/bin"}}, {{"FOO", "command"}});
  auto has = [&](const std::string& kv) { return std::find(env.begin(), env.end(), kv) != env.end(); };
  CHECK(has("HOME=/home/user"));
  CHECK(has("USER=user"));
  CHECK(has("FOO=command"));
  CHECK(has("PATH=/opt/bin"));
  CHECK_FALSE(has("FOO=sandbox"));
}

TEST_CASE("env assignments and exec requests are validated") {
  CHECK(parse_env_assignment("A_1=x=y")->second == "x=y");
  CHECK_FALSE(parse_env_assignment("noequals"));
  CHECK_FALSE(parse_env_assignment("=x"));
  CHECK_FALSE(parse_env_assignment("1A=x"));
  CHECK_FALSE(parse_env_assignment("A-B=x"));

  CHECK_FALSE(CommandRequest::from_json({{"argv", protocol::Json::array()}}));
  CHECK_FALSE(CommandRequest::from_json({{"argv", {"ls"}}, {"timeout_s", -1}}));
  CHECK_FALSE(CommandRequest::from_json({{"argv", {"ls"}}, {"cwd", "relative"}}));
  CHECK_FALSE(CommandRequest::from_json({{"argv", {"ls", 3}}}));
  auto ok = CommandRequest::from_json({{"argv", {"ls", "-l"}}, {"env", {{"A", "b"}}}, {"timeout_s", 2}});
  REQUIRE(ok);
  CHECK(ok->argv.size() == 2);
  CHECK(ok->timeout_s == 2);
  CHECK(ok->env.front().first == "A");
}

TEST_CASE("variables read when a process starts are known (a warm claim cannot honour them)") {
  for (const char* name : {"PYTHONPATH", "PYTHONHASHSEED", "LD_PRELOAD", "LD_LIBRARY_PATH", "TZ", "HOME", "PATH", "TMPDIR", "LANG",
                           "LC_ALL", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_MAX_THREADS",
                           "MPLBACKEND", "MPLCONFIGDIR", "MALLOC_ARENA_MAX", "GLIBC_TUNABLES"})
    CHECK(env_read_at_process_start(name));
  for (const char* name : {"API_KEY", "GREETING", "WHO", "MY_PATH", "XTZ", "DATABASE_URL", "STAGE"})
    CHECK_FALSE(env_read_at_process_start(name));
}

TEST_CASE("a kernel starts like the zygote's unless a variable read at start differs") {
  // The zygote's own start environment, and any other variables beside it.
  auto base = kernel_zygote_environment();
  CHECK(differs_from_kernel_zygote(base) == "");
  CHECK(differs_from_kernel_zygote(command_environment(PackageSources{}.environment(), {{"API_KEY", "k"}, {"GREETING", "hi"}})) == "");
  CHECK(std::find(base.begin(), base.end(), "PYTHONPATH=/opt/nsbox/python") != base.end());
  // The caller's PYTHONPATH, LANG or hash seed: init execs the kernel, which reads them.
  for (auto [k, v] : std::vector<std::pair<std::string, std::string>>{
           {"PYTHONPATH", "/home/user/lib"}, {"LANG", "C"}, {"PYTHONHASHSEED", "0"}, {"TZ", "UTC"}, {"LD_PRELOAD", "x.so"}}) {
    INFO(k);
    CHECK(differs_from_kernel_zygote(command_environment(PackageSources{}.environment(), {{k, v}})) == k);
  }
  // Without the user site's base the kernel's start differs too.
  CHECK(differs_from_kernel_zygote(command_environment({}, {})) != "");
}
