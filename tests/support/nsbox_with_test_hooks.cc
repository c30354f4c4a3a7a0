// nsbox-with-test-hooks: the `nsbox` command line (cli/command_line.cc), built for the
// tests only, which also reads three test hooks from its environment into every
// supervisor's launch envelope (runtime/core/sandbox_spec.h). The programs nsbox ships
// read none of them; tests/support/nsbox_cli.h runs this one when a hook is set.
//
//   NSBOX_TEST_RESOLVE=name=address,...   names the egress proxy answers without DNS
//                                         (servers of the test's own on loopback)
//   NSBOX_TEST_NETNS=/proc/PID/ns/net     the network namespace the host-side network
//                                         helpers run in (tests/support/test_network.h)
//   NSBOX_TEST_KERNEL_ZYGOTE=SOCKET       a zygote's socket, where kernels come from (as
//                                         `serve` gives its own); empty: through init
//
// stdin, stdout, stderr, exit status: those of `nsbox`.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

#include "cli/commands.h"
#include "runtime/client/runtime.h"
#include "runtime/core/net_policy.h"
#include "runtime/core/sandbox_spec.h"

namespace {

std::map<std::string, std::string> resolve_overrides(std::string_view rest) {
  std::map<std::string, std::string> out;
  while (!rest.empty()) {
    std::string_view item = rest.substr(0, rest.find(','));
    rest.remove_prefix(std::min(rest.size(), item.size() + 1));
    if (size_t eq = item.find('='); eq != std::string_view::npos)
      out[nsbox::net::normalize_host(item.substr(0, eq))] = std::string(item.substr(eq + 1));
  }
  return out;
}

void add_test_hooks(nsbox::LaunchEnvelope& launch) {
  if (const char* names = std::getenv("NSBOX_TEST_RESOLVE")) launch.net_resolve = resolve_overrides(names);
  if (const char* netns = std::getenv("NSBOX_TEST_NETNS")) launch.helper_netns = netns;
  if (const char* zygote = std::getenv("NSBOX_TEST_KERNEL_ZYGOTE")) launch.kernel_zygote = zygote;
}

}  // namespace

int main(int argc, char** argv) {
  nsbox::set_launch_hook(add_test_hooks);
  return nsbox::cli::run_command_line(argc, argv);
}
