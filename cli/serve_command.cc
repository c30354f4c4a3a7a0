// serve: the HTTP API. The server is its own static program (libexec/nsbox/nsbox-server,
// docs/decisions.md): `nsbox serve` execs it, so the pid that prints the ready line and
// gets SIGTERM is the server's.
#include <unistd.h>

#include <vector>

#include "cli/commands.h"
#include "runtime/install_layout.h"

namespace nsbox::cli {

int cmd_serve(const Invocation& inv) {
  Output out{inv.json};
  auto layout = InstallLayout::discover();
  if (!layout) return out.error(layout.error());
  std::string server = layout->api_server();
  std::vector<std::string> args = {"nsbox-server"};
  if (inv.root) args.insert(args.end(), {"--root", *inv.root});
  args.insert(args.end(), inv.args.begin(), inv.args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(server.c_str(), argv.data());
  return out.error(sys_error("start " + server).with_hint("reinstall nsbox: its HTTP server is missing"));
}

}  // namespace nsbox::cli
