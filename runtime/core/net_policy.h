// A sandbox's network policy (docs/network.md): the mode, and for `allow` the names the
// egress proxy lets through and those of them that may resolve to private addresses.
//
//   --net none | host | allow=ENTRY[,ENTRY...]      ENTRY: host, *.domain or host:port
//   --net-allow-private NAME[,NAME...]               names of the allowlist
//   API: "net": "none" | "host" | {"allow": [...], "allow_private": [...]}
//
// An entry without a port allows 80 and 443. Names are matched lower-case, without a
// trailing dot; `*.example.com` matches any name under example.com, not example.com.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "isolation/network.h"
#include "isolation/sys/error.h"
#include "runtime/core/command.h"  // EnvList
#include "runtime/protocol/frame.h"

namespace nsbox::net {

struct AllowEntry {
  std::string host;  // lower-case; for a wildcard, the domain after "*."
  bool wildcard = false;
  uint16_t port = 0;  // 0: 80 and 443

  std::string text() const;  // as written: "*.example.com", "api.x.io:8443"
};

struct AllowList {
  static constexpr size_t kMaxEntries = 256;

  std::vector<AllowEntry> entries;
  std::vector<std::string> private_names;  // hosts of `entries` that may resolve to private addresses

  // The entry that lets host:port through; nullptr if none does.
  const AllowEntry* match(std::string_view host, uint16_t port) const;
  bool private_allowed(std::string_view host) const;
  protocol::Json to_json() const;  // {"allow": [...], "allow_private": [...]}
  static Result<AllowList> from_json(const protocol::Json& j);
  // "allow=a.com,*.b.org" from the part after "allow=" and --net-allow-private's value.
  static Result<AllowList> parse(std::string_view entries, std::string_view private_names);
  std::string describe() const;  // "pypi.org, *.github.com (private: pypi.local)"
};

struct NetPolicy {
  network::Mode mode = network::Mode::kNone;
  AllowList allow;  // mode kAllow only

  // The API's "net" (a string, or an {"allow", "allow_private"} object).
  static Result<NetPolicy> from_json(const protocol::Json& net);
  // The CLI's --net ("none", "host", "internet", "allow=ENTRY,..."). Private names come
  // with the allowlist's JSON (AllowList), checked where the index may add to it
  // (PackageSources::network_policy).
  static Result<NetPolicy> parse(std::string_view net);
  protocol::Json to_json() const;  // a string, or the object for allow
  std::string describe() const;    // "allow: pypi.org, *.github.com"
};

// Where the egress proxy listens inside a sandbox, and the environment that points every
// process of the sandbox at it (pip, curl, requests and urllib read these).
inline constexpr uint16_t kProxyPort = 3128;
EnvList proxy_environment();

// "a, b,,c" -> {"a", "b", "c"}: a comma-separated flag's items, trimmed, empty ones dropped.
std::vector<std::string> split_list(std::string_view text);

// Splits "host:port", "[v6]:port" or "host" (then `default_port`; 0: a port is required).
bool split_authority(std::string_view authority, uint16_t default_port, std::string& host, uint16_t& port);

// A host name as the proxy compares it: lower-case, no trailing dot; "" if it is not a
// valid DNS name or IP literal.
std::string normalize_host(std::string_view host);

}  // namespace nsbox::net
