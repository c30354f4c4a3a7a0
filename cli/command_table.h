// Every command of `nsbox`, its flags and what they do: one table, from which the
// argument parser takes what each command accepts and `nsbox help` / `nsbox CMD --help`
// are written, so a flag cannot be accepted and undocumented (or the reverse).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"

namespace nsbox::cli {

struct CommandHelp {
  const char* name;
  const char* synopsis;  // after `nsbox NAME`
  const char* summary;   // one line, for `nsbox help`
  std::vector<FlagHelp> flags;
  int (*run)(const Invocation&);
  // sh, run and exec: their exit status is the command's (or cell's), so nsbox's own
  // failures exit 125 (docker's and podman's convention) and are never taken for it.
  bool passes_exit_status = false;
  const char* notes = nullptr;  // more lines for `nsbox NAME --help`

  FlagSpec spec() const;
  std::string usage() const;  // `nsbox NAME --help`
};

const std::vector<CommandHelp>& command_table();
const CommandHelp* find_command(std::string_view name);  // aliases too
std::string general_help();                              // `nsbox help`

}  // namespace nsbox::cli
