// nsbox: the command line. `nsbox help` for the commands; docs/cli.md for the details.
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace {

constexpr const char* kUsage = R"(nsbox: local sandboxes for agent code

usage: nsbox [--root DIR] [--json] COMMAND [ARGS]

  create [--size S] [--name N] [--net none|host] [--env K=V]...   start a sandbox, print its id
         [--volume NAME] [--files-quota SIZE]                    (a named, shared /mnt/files; its quota, 10G)
  ls                                                             list sandboxes
  inspect ID                                                     show one sandbox
  exec ID (-c CODE | -f FILE | -) [--timeout S]                 run a cell of Python (state persists)
  interrupt ID                                                   interrupt the running cell
  restart ID                                                     a fresh Python interpreter
  sh ID [--timeout S] [--env K=V]... -- CMD...                   run a command in a sandbox
  run [--size S] [--net M] [--timeout S] [--env K=V]... -- CMD...  one-shot: create, run, remove
  resize ID --size S                                             change a running sandbox's size
  files ID upload LOCAL [REMOTE] | ls [PATH] | download REMOTE [LOCAL] | rm PATH [-r]
                                                                 the sandbox's /mnt/files, from here
  volume ls | rm NAME...                                         named files volumes
  rm ID... [--keep-files]                                        stop and delete sandboxes
  doctor                                                         check this host

sizes: standard (1 vCPU, 1 GiB, default), medium (2, 2 GiB), large (4, 4 GiB), xlarge (8, 8 GiB)
ID is a sandbox id (sbx-...) or name. --json prints one JSON document; errors go to stderr.
)";

struct Route {
  const char* name;
  int (*run)(const nsbox::cli::Invocation&);
};

constexpr Route kRoutes[] = {
    {"create", nsbox::cli::cmd_create}, {"ls", nsbox::cli::cmd_ls},         {"list", nsbox::cli::cmd_ls},
    {"inspect", nsbox::cli::cmd_inspect}, {"sh", nsbox::cli::cmd_sh},       {"exec-command", nsbox::cli::cmd_sh},
    {"run", nsbox::cli::cmd_run},       {"resize", nsbox::cli::cmd_resize}, {"rm", nsbox::cli::cmd_rm},
    {"doctor", nsbox::cli::cmd_doctor},   {"exec", nsbox::cli::cmd_exec},     {"interrupt", nsbox::cli::cmd_interrupt},
    {"restart", nsbox::cli::cmd_restart}, {"files", nsbox::cli::cmd_files},   {"volume", nsbox::cli::cmd_volume},
};

}  // namespace

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
  if (i >= argc || !std::strcmp(argv[i], "help") || !std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
    std::cout << kUsage;
    return i >= argc ? nsbox::cli::kExitUsage : 0;
  }
  std::string command = argv[i];
  inv.args.assign(argv + i + 1, argv + argc);
  for (const auto& route : kRoutes)
    if (command == route.name) return route.run(inv);
  nsbox::cli::Output out{inv.json};
  return out.error(nsbox::make_error(nsbox::ErrorCode::kInvalidArgument, "unknown command '" + command + "'",
                                     "see `nsbox help`"));
}
