// The supervisor's side of a sandbox's egress proxy (`--net allow=...`, docs/network.md):
// the proxy process (runtime/netproxy/netproxy_main.cc) runs on the host side, a helper
// process like the bucket servers and the tool bridge, and accepts on a socket listening
// at 127.0.0.1:kProxyPort inside the sandbox's network namespace, which has no other way
// out. The allowlist is the proxy's state: set_allow() replaces it live.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>

#include "runtime/core/net_policy.h"
#include "runtime/supervisor/helper_process.h"

namespace nsbox {

struct NetProxySetup {
  std::string sandbox_id;
  std::string program;     // libexec/nsbox/nsbox-netproxy
  std::string denial_log;  // <run>/sandboxes/<id>/net-denials.log
  pid_t init_pid = 0;
  net::AllowList allow;
  std::map<std::string, std::string> resolve_override;  // tests only (LaunchEnvelope::net_resolve)
  std::string helper_netns;  // tests only: the network namespace it runs in (LaunchEnvelope::helper_netns)
};

class NetProxy {
 public:
  static constexpr int kReadyMs = 10000;

  NetProxy() = default;
  // Listening inside the sandbox and serving when it returns.
  static Result<NetProxy> start(const NetProxySetup& setup);
  Result<void> set_allow(const net::AllowList& allow);
  int pidfd() const { return process_.pidfd(); }
  void on_exit();  // logs how it ended: the sandbox has no way out from then on
  void stop();

 private:
  HelperProcess process_;
  UniqueFd control_;  // its stdin: one allowlist per line
};

}  // namespace nsbox
