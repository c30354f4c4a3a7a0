// The egress proxy of a sandbox with `--net allow=...` (docs/network.md): an HTTP proxy on
// the host side whose listening socket lives in the sandbox's network namespace
// (network::listen_inside), the sandbox's only way out. Per connection:
//
//   1. read the request head (kMaxRequestHead, within kHeadTimeoutS in all);
//   2. check host:port against the allowlist, before any DNS query;
//   3. resolve the name itself and drop every address of a blocked class (loopback,
//      private, link-local/metadata, CGNAT, multicast, reserved) unless the name is
//      allowed private; connect to exactly an address it checked (no second lookup);
//   4. CONNECT: answer 200, read the TLS ClientHello and refuse a server name other than
//      the CONNECT host; plain HTTP: send the head on in origin form;
//   5. relay both ways until both sides end or kIdleTimeoutS pass without a byte.
//
// A denial is an HTTP 403 whose body says which rule, and a JSON line in the denial log
// (`nsbox inspect` shows the last ones). A sandbox opening more than kMaxConnections at
// once gets 503 for the rest. The allowlist can be replaced while it runs.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/core/net_policy.h"

namespace nsbox::net {

struct ProxyConfig {
  std::string sandbox_id;
  AllowList allow;
  std::string denial_log;  // <run>/sandboxes/<id>/net-denials.log
  // Names answered without DNS: only tests set it (LaunchEnvelope::net_resolve), to reach servers
  // of their own on loopback by a name.
  std::map<std::string, std::string> resolve_override;
};

class EgressProxy {
 public:
  static constexpr int kMaxConnections = 256;
  static constexpr int kHeadTimeoutS = 30;
  static constexpr int kConnectTimeoutS = 15;
  static constexpr int kIdleTimeoutS = 300;
  static constexpr size_t kMaxDenialLog = 1u << 20;  // then it starts again (the old one kept as .1)

  explicit EgressProxy(ProxyConfig config);
  void set_allow(AllowList allow);
  // Accepts on `listen_fd` forever, a thread per connection.
  [[noreturn]] void serve(int listen_fd);

 private:
  void handle(int client);
  void deny(int client, int status, const std::string& host, uint16_t port, const std::string& reason);
  std::shared_ptr<const AllowList> allow() const;

  ProxyConfig config_;
  mutable std::mutex mutex_;
  std::shared_ptr<const AllowList> allow_;
  int connections_ = 0;
};

}  // namespace nsbox::net
