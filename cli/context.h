// What every command starts with: its parsed arguments, the output style, the runtime.
#pragma once

#include <optional>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "runtime/client/runtime.h"

namespace nsbox::cli {

struct CommandContext {
  ParsedArgs args;
  Output out;
  std::optional<Runtime> runtime;
};

// `nsbox sh --tty`: argv on a terminal of the sandbox, this terminal in raw mode, its
// window size followed; the exit status is the command's (cli/pty_commands.cc).
int sh_on_tty(CommandContext& ctx, const std::string& sandbox, const CommandRequest& command);

// Parses the arguments by the command's flags (cli/command_table.h), settles --json and
// --root, opens the runtime. On failure the error has been printed and `exit_code` set.
std::optional<CommandContext> prepare(const Invocation& inv, int& exit_code, bool open_runtime = true);

// Reads the --env K=V flags.
Result<EnvList> env_flags(const ParsedArgs& args);
// Reads --timeout S (seconds, > 0).
Result<double> timeout_flag(const ParsedArgs& args);
// `path` made absolute against the working directory (flags naming host paths).
std::string absolute_path(std::string path);
// The real path (no symlink, no `..`) of an existing directory a flag names; for a
// file, of the directory holding it.
Result<std::string> real_dir(const std::string& path, const std::string& flag);
// The tool bridge's config (runtime/core/tools_config.h) from --tools, --tools-dir,
// --tools-replay, --tools-record, --user-id, --llm-url, --llm-model; paths made absolute.
nlohmann::json tools_document(const ParsedArgs& args);
// This command's environment, with --tools-config FILE as NSBOX_TOOLS_CONFIG.
bucket::Environment tools_environment(const ParsedArgs& args);

}  // namespace nsbox::cli
