// A command run in a sandbox (the bash tool, `nsbox sh`, `nsbox run`): what is asked,
// the environment it gets, and how its end is reported.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "isolation/size_tier.h"
#include "runtime/protocol/frame.h"

namespace nsbox {

using EnvList = std::vector<std::pair<std::string, std::string>>;

constexpr double kDefaultTimeoutS = 180;

// Where long output of a cell or command spills, relative to /mnt/files: nsbox's place,
// or the hosted workbench's (the workbench tool shapes use it, docs/tools.md).
constexpr const char* kOutputDir = ".nsbox/output";
constexpr const char* kComposioOutputDir = ".composio/output";
// One of the two, or an error naming them.
Result<std::string> parse_output_dir(const protocol::Json& value);

// A sandbox's workspace root unless its spec names another (runtime/core/sandbox_spec.h):
// the working directory of its commands, PTY sessions, processes and kernel.
constexpr const char* kDefaultWorkspaceRoot = "/home/user";
// A request's "cwd": an absolute path, or "" when absent (the sandbox's workspace root,
// which its supervisor knows).
Result<std::string> cwd_of(const protocol::Json& request);
// A request's "run_as": an account's name, or "" when absent (the sandbox's user).
Result<std::string> run_as_of(const protocol::Json& request);

struct CommandRequest {
  std::vector<std::string> argv;
  EnvList env;  // on top of the sandbox's
  std::string cwd;  // "": the sandbox's workspace root
  std::string run_as;  // an account of the sandbox's (runtime/core/sandbox_accounts.h); "": user
  double timeout_s = kDefaultTimeoutS;
  std::string output_dir = kOutputDir;  // where long output spills, in the files volume

  protocol::Json to_json() const;
  static Result<CommandRequest> from_json(const protocol::Json& j);
  // Arguments, cwd and env are UTF-8 (JSON would rewrite anything else on the way).
  Result<void> check() const;
};

// Every name and value is UTF-8.
Result<void> check_env(const EnvList& env);

// Whether a process reads the variable when it starts (the interpreter's PYTHON*, the
// loader's LD_* and glibc's GLIBC_TUNABLES, the locale, the time zone, HOME/PATH/TMPDIR,
// the BLAS thread pools'):
// setting it in a process that already runs changes nothing. A warm pool's claim cannot
// honour these (runtime/client/runtime.h, Runtime::claim).
bool env_read_at_process_start(std::string_view name);

// "K=V" -> pair; rejects a missing '=', an empty or odd key, a value that is not UTF-8.
Result<std::pair<std::string, std::string>> parse_env_assignment(const std::string& text);

// What every command sees: the defaults of a login as `user`, then the sandbox's --env,
// then the command's own.
std::vector<std::string> command_environment(const EnvList& sandbox_env, const EnvList& command_env);

// The environment the kernel zygote starts with (docs/kernel-zygote.md): what every
// kernel's start reads, as a sandbox with no variables of its own gives it.
std::vector<std::string> kernel_zygote_environment();
// Whether a kernel with `kernel_env` (NAME=value) would start as the zygote did: every
// variable read at the interpreter's start (env_read_at_process_start) the same in both.
// Otherwise its kernel is exec'd by init, which reads them: the first such variable's
// name that differs, "" when none does.
std::string differs_from_kernel_zygote(const std::vector<std::string>& kernel_env);

// How a command ended, as seen by init and the supervisor.
struct CommandEnd {
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::optional<int> spawn_errno;  // exec failed
  bool timed_out = false;
  bool oom_killed = false;  // the cgroup's OOM counter rose while it ran
  std::vector<std::string> seccomp_kills;
};

struct CommandResult {
  std::string status;  // ok | error | timeout | killed
  std::string reason;  // "" | exit | not_found | not_executable | deadline | oom | seccomp | signal
  int exit_code = 0;   // shell style: 128+N for signal N, 127 not found, 124 timeout
  std::optional<int> signal;
  std::string message;  // one line when status is not ok
  uint64_t duration_ms = 0;
  // As the supervisor sent it: also stdout/stderr (the first 64 KiB), their byte and line
  // counts, truncation and file paths (docs/semantics.md). Empty for a one-shot run.
  protocol::Json raw;

  protocol::Json to_json() const;
  static CommandResult from_json(const protocol::Json& j);
};

CommandResult classify(const CommandEnd& end, const std::string& program, const Limits& limits,
                       std::string_view size_name, double timeout_s);

}  // namespace nsbox
