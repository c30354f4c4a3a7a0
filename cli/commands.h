// The `nsbox` commands. Each parses its own arguments and returns the process exit code.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/output.h"

namespace nsbox::cli {

struct CommandHelp;

// What `nsbox ARGS...` does: the global flags, then the command (`main` of nsbox, and of
// the tests' nsbox-with-test-hooks).
int run_command_line(int argc, char** argv);

struct Invocation {
  const CommandHelp* command = nullptr;  // its row of cli/command_table.h
  std::vector<std::string> args;     // after the command name
  std::optional<std::string> root;   // global --root
  bool json = false;                 // global --json
};

int cmd_create(const Invocation& inv);
int cmd_ls(const Invocation& inv);
int cmd_inspect(const Invocation& inv);
int cmd_sh(const Invocation& inv);
int cmd_run(const Invocation& inv);
int cmd_resize(const Invocation& inv);
int cmd_net(const Invocation& inv);
int cmd_ttl(const Invocation& inv);
int cmd_port(const Invocation& inv);
int cmd_workspace(const Invocation& inv);
int cmd_rm(const Invocation& inv);
int cmd_stop(const Invocation& inv);
int cmd_start(const Invocation& inv);
int cmd_resume(const Invocation& inv);
int cmd_snapshot(const Invocation& inv);
int cmd_pty(const Invocation& inv);
int cmd_spawn(const Invocation& inv);
int cmd_ps(const Invocation& inv);
int cmd_logs(const Invocation& inv);
int cmd_kill(const Invocation& inv);
int cmd_doctor(const Invocation& inv);
int cmd_exec(const Invocation& inv);
int cmd_interrupt(const Invocation& inv);
int cmd_restart(const Invocation& inv);
int cmd_files(const Invocation& inv);
int cmd_volume(const Invocation& inv);
int cmd_image(const Invocation& inv);
int cmd_serve(const Invocation& inv);
int cmd_drain(const Invocation& inv);
int cmd_tools(const Invocation& inv);
int cmd_workbench(const Invocation& inv);

// Shared by the commands: parse, settle --json/--root, open the runtime.
struct CommandContext;

}  // namespace nsbox::cli
