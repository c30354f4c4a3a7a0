// What a sandbox sends its egress proxy (runtime/netproxy/proxy_parsers.h), and what a user or
// an API caller gives as an allowlist (runtime/core/net_policy.h). The first byte picks
// the parser; the rest is its input.
//
// Checks: a request head that parses names a non-empty host and a port; a plain request's
// upstream head is one origin-form request line, the headers it had less the proxy's own,
// and ends the head once; a ClientHello's server name is a part of the input; an
// allowlist that parses comes back the same from its saved form, and each entry matches
// itself.
#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/core/address_class.h"
#include "runtime/core/net_policy.h"
#include "runtime/netproxy/proxy_parsers.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using namespace nsbox::net;

void request_head(std::string_view text) {
  std::string head(text.substr(0, text.find("\r\n\r\n")));  // as the proxy reads a head
  head += "\r\n\r\n";
  std::string error;
  auto r = parse_request_head(head, error);
  if (!r) {
    FUZZ_CHECK(!error.empty());
    return;
  }
  FUZZ_CHECK(!r->host.empty() && r->port != 0);
  if (r->connect) return;
  const std::string& up = r->upstream_head;
  FUZZ_CHECK(up.ends_with("\r\n\r\n"));
  FUZZ_CHECK(up.find("\r\n\r\n") == up.size() - 4);
  std::string line = up.substr(0, up.find("\r\n"));
  FUZZ_CHECK(line.starts_with(r->method + " /"));
  FUZZ_CHECK(up.find("\r\nProxy-Authorization:") == std::string::npos);
  (void)normalize_host(r->host);
  (void)classify_literal(r->host);
}

void client_hello(std::string_view bytes) {
  std::string name;
  if (parse_client_hello(bytes, name) == HelloStatus::kDone && !name.empty())
    FUZZ_CHECK(bytes.find(name) != std::string_view::npos);
}

void allowlist(std::string_view text) {
  size_t bar = text.find('|');
  auto policy = NetPolicy::parse(text.substr(0, bar));
  if (!policy) return;
  if (bar != std::string_view::npos && policy->mode == nsbox::network::Mode::kAllow) {
    auto with_private = AllowList::parse(text.substr(6, bar - 6), text.substr(bar + 1));
    if (!with_private) return;
    policy->allow = *with_private;
  }
  auto again = NetPolicy::from_json(policy->to_json());
  FUZZ_CHECK(again.has_value());
  FUZZ_CHECK(again->to_json() == policy->to_json());
  for (const auto& e : policy->allow.entries) {
    FUZZ_CHECK(!e.host.empty());
    if (!e.wildcard) FUZZ_CHECK(policy->allow.match(e.host, e.port ? e.port : 443) != nullptr);
    else FUZZ_CHECK(policy->allow.match("x." + e.host, e.port ? e.port : 443) != nullptr);
  }
  (void)policy->describe();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: request_head(rest); break;
    case 1: client_hello(rest); break;
    default: allowlist(rest); break;
  }
  return 0;
}
