// A sandbox's port through `nsbox serve` itself (docs/api.md, "Ports"): a request to
// /v1/sandboxes/{id}/ports/{P}/REST goes to the sandbox's 127.0.0.1:P as REST, and, when
// the server has a domain for ports (its --public-url's host), any request whose Host is
// {P}-{id}.{domain} goes there as it is. HTTP of any kind passes, streaming and WebSocket
// upgrades included: after the head, the connection is a tunnel (api/http_server.cc).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "api/exchange.h"

namespace nsbox::api {

struct TunnelTarget {
  std::string sandbox;  // an id or name, as sent
  uint16_t port = 0;
  std::string target;   // what the sandbox's server is asked for: a path and query, encoded
  std::string prefix;   // the path the server took off ("" when routed by Host)
};

// The host of a URL when it is a name ("http://sbx.example:8080/x" -> "sbx.example"); ""
// for an address or a URL without a host: the ports' domain of --public-url.
std::string url_domain(const std::string& url);

// Which port `r` is for, if any. `domain`: the ports' domain ("" for none).
std::optional<TunnelTarget> tunnel_target(const HttpRequest& r, const std::string& domain);

// The request's head as the sandbox's server gets it: the target rewritten, the client's
// credentials (Authorization, Cookie only when routed by path: a Host-routed app owns its
// cookies) and the hop-by-hop headers of the path form taken out, X-Forwarded-* added, and
// `Connection: close` unless it is an upgrade (one request per tunnel: a second request on
// the connection would skip the rewriting).
std::string upstream_head(const HttpRequest& r, const TunnelTarget& t);

// How many tunnels run: at most kMaxTunnels in the server and kMaxPerSandbox to one
// sandbox (each holds two sockets and its connection's slot, never a worker). take()
// answers what to hold while one runs (kBusy past a limit, naming it).
class TunnelCount {
 public:
  static constexpr int kMaxTunnels = 512, kMaxPerSandbox = 64;
  Result<std::shared_ptr<void>> take(const std::string& sandbox);

 private:
  std::mutex mutex_;
  int total_ = 0;
  std::map<std::string, int> per_sandbox_;
};

}  // namespace nsbox::api
