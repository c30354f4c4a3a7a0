// nsbox-netproxy: a sandbox's egress proxy (runtime/netproxy/egress_proxy.h), a helper process
// of its supervisor (runtime/supervisor/net_proxy.h).
//
//   stdin   one line of JSON, the config: {"sandbox_id", "allow": {"allow": [...],
//           "allow_private": [...]}, "denial_log", "resolve": {"name": "address"}};
//           then one line per new allowlist ({"allow": [...], ...}); EOF: exit
//   fd 3    the listening socket, in the sandbox's network namespace
//   fd 4    the report: one line, {"ok": true} once it serves, or {"ok": false, "error"}
//   stderr  the supervisor's log
#include <signal.h>
#include <unistd.h>

#include <iostream>
#include <string>
#include <thread>

#include "isolation/sys/files.h"
#include "isolation/sys/log.h"
#include "runtime/netproxy/egress_proxy.h"
#include "runtime/protocol/frame.h"

using namespace nsbox;
using protocol::Json;

namespace {

constexpr int kListenFd = 3;
constexpr int kReportFd = 4;

Result<net::ProxyConfig> parse_config(const std::string& line) {
  Json j = Json::parse(line, nullptr, false);
  if (!j.is_object()) return fail(make_error(ErrorCode::kMalformedRequest, "the proxy's config is not a JSON object"));
  net::ProxyConfig c;
  c.sandbox_id = j.value("sandbox_id", "");
  c.denial_log = j.value("denial_log", "");
  c.allow = NSBOX_TRY(net::AllowList::from_json(j.value("allow", Json::object())));
  if (auto r = j.find("resolve"); r != j.end() && r->is_object())
    for (const auto& [name, address] : r->items())
      if (address.is_string()) c.resolve_override[net::normalize_host(name)] = address.get<std::string>();
  return c;
}

void report(const Json& j) { (void)files::write_all(kReportFd, j.dump() + "\n", "the report"); }

}  // namespace

int main() {
  log::set_program("nsbox-netproxy");
  ::signal(SIGPIPE, SIG_IGN);
  std::string line;
  if (!std::getline(std::cin, line)) return 1;
  auto config = parse_config(line);
  if (!config) {
    report({{"ok", false}, {"error", config.error().message}});
    return 1;
  }
  static net::EgressProxy proxy(std::move(*config));
  std::thread([] { proxy.serve(kListenFd); }).detach();
  report({{"ok", true}});
  ::close(kReportFd);
  // The control channel: each line replaces the allowlist; EOF means the supervisor is
  // done with us.
  while (std::getline(std::cin, line)) {
    auto list = net::AllowList::from_json(Json::parse(line, nullptr, false));
    if (list) proxy.set_allow(std::move(*list));
    else log::warn("a new allowlist was refused: " + list.error().message);
  }
  ::_exit(0);
}
