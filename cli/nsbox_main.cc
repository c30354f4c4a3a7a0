// nsbox: the command line. `nsbox help` lists the commands (cli/command_table.cc);
// docs/cli.md says what each does.
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "cli/command_table.h"
#include "cli/commands.h"
#include "cli/output.h"

int main(int argc, char** argv) {
  nsbox::cli::Invocation inv;
  int i = 1;
  for (; i < argc; ++i) {
    std::string w = argv[i];
    if (w == "--json") inv.json = true;
    else if (w == "--root" && i + 1 < argc) inv.root = argv[++i];
    else if (w.rfind("--root=", 0) == 0) inv.root = w.substr(7);
    else break;
  }
  if (i >= argc) {
    std::cerr << nsbox::cli::general_help();
    return nsbox::cli::kExitUsage;
  }
  std::string command = argv[i];
  inv.args.assign(argv + i + 1, argv + argc);
  if (command == "help" || command == "--help" || command == "-h") {
    const auto* about = inv.args.empty() ? nullptr : nsbox::cli::find_command(inv.args.front());
    std::cout << (about ? about->usage() : nsbox::cli::general_help());
    return 0;
  }
  inv.command = nsbox::cli::find_command(command);
  nsbox::cli::Output out{inv.json};
  if (!inv.command)
    return out.error(nsbox::make_error(nsbox::ErrorCode::kInvalidArgument, "unknown command '" + command + "'", "see `nsbox help`"));
  // `nsbox CMD --help`, before anything else is looked at (but not after `--`: that is
  // the sandboxed command's own).
  for (const auto& a : inv.args) {
    if (a == "--") break;
    if (a == "--help" || a == "-h") {
      std::cout << inv.command->usage();
      return 0;
    }
  }
  return inv.command->run(inv);
}
