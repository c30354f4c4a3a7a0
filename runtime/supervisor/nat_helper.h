// `--net internet` (docs/network.md): raw TCP and UDP out through user-mode NAT, with the
// ranges that reach the host, its LAN and the metadata service refused.
//
//   - slirp4netns, a helper process on the host side, serves a tap device it makes in the
//     sandbox's network namespace (10.0.2.100/24, gateway 10.0.2.2, DNS forwarder
//     10.0.2.3), with the host's loopback not mapped (--disable-host-loopback), its own
//     seccomp filter and, as root, its own mount namespace;
//   - nftables rules in the sandbox's network namespace refuse (ICMP admin-prohibited, so
//     a connect fails at once) every packet to a blocked IPv4 range (address_class.h's
//     kBlockedV4: 10.0.2.0/24 is in it, so the gateway is refused too) but DNS to
//     10.0.2.3, and all IPv6. Sandbox processes hold no capability, so they cannot change
//     the rules: the kernel enforces them below the NAT, whatever the helper does;
//   - the sandbox's /etc/resolv.conf names 10.0.2.3 (the host's resolver may be
//     127.0.0.53, which the sandbox cannot reach and need not know).
#pragma once

#include <sys/types.h>

#include <string>

#include "runtime/supervisor/helper_process.h"

namespace nsbox {

struct NatSetup {
  pid_t init_pid = 0;
  // A network namespace (a /proc/PID/ns/net path) to run the NAT helper in instead of
  // the supervisor's: tests only (LaunchEnvelope::helper_netns), so that what the sandbox reaches
  // is a namespace the test made, from which nothing can leave the machine.
  std::string helper_netns;
};

class NatHelper {
 public:
  static constexpr int kReadyMs = 10000;
  static constexpr const char* kResolvConf = "nameserver 10.0.2.3\n";

  NatHelper() = default;
  // The rules first, then the helper: the sandbox never has a way out unfiltered.
  static Result<NatHelper> start(const NatSetup& setup);
  int pidfd() const { return process_.pidfd(); }
  void on_exit();
  void stop() { process_.stop(500); }

  // The ruleset, as `nft -f -` reads it.
  static std::string ruleset();

 private:
  HelperProcess process_;
};

}  // namespace nsbox
