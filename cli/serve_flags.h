// `nsbox serve`'s flags, declared once: the CLI's command table takes them for
// `nsbox serve --help` (cli/command_table.cc), and nsbox-server, which `nsbox serve` execs
// with its arguments untouched, reads its argv by them (api/server_main.cc). A library of
// its own with the argument reader (nsbox_cli_flags), so that the server links neither the
// CLI's commands nor they the server.
#pragma once

#include <string>
#include <vector>

#include "cli/args.h"

namespace nsbox::cli {

// Also flags of the commands that make or restore snapshots (create, start, resume, snapshot).
extern const FlagHelp kSnapshotDir;
extern const FlagHelp kSnapshotStore;

const std::vector<FlagHelp>& serve_flags();

// "nsbox serve [--socket PATH] [--listen ADDR:PORT] [--allow-remote] ...", for errors.
std::string serve_synopsis();

}  // namespace nsbox::cli
