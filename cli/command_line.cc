#include <iostream>
#include <string>
#include <vector>

#include "cli/command_table.h"
#include "cli/commands.h"
#include "cli/output.h"

namespace nsbox::cli {

int run_command_line(int argc, char** argv) {
  Invocation inv;
  int i = 1;
  for (; i < argc; ++i) {
    std::string w = argv[i];
    if (w == "--json") inv.json = true;
    else if (w == "--root" && i + 1 < argc) inv.root = argv[++i];
    else if (w.rfind("--root=", 0) == 0) inv.root = w.substr(7);
    else break;
  }
  if (i >= argc) {
    std::cerr << general_help();
    return kExitUsage;
  }
  std::string command = argv[i];
  inv.args.assign(argv + i + 1, argv + argc);
  if (command == "help" || command == "--help" || command == "-h") {
    const auto* about = inv.args.empty() ? nullptr : find_command(inv.args.front());
    std::cout << (about ? about->usage() : general_help());
    return 0;
  }
  inv.command = find_command(command);
  Output out{inv.json};
  if (!inv.command)
    return out.error(make_error(ErrorCode::kInvalidArgument, "unknown command '" + command + "'", "see `nsbox help`"));
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

}  // namespace nsbox::cli
