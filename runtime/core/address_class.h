// Which addresses a sandbox's traffic may reach when its policy is `allow=` or `internet`
// (docs/network.md): public unicast only. Everything that reaches the host, its LAN or
// the cloud's metadata service is blocked unless a name is allowed private on purpose.
//
// Pure: it classifies literal addresses and never connects or resolves.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <optional>
#include <string>
#include <string_view>

namespace nsbox::net {

enum class AddressClass {
  kPublic,
  kUnspecified,  // 0.0.0.0/8, ::
  kLoopback,     // 127/8, ::1
  kPrivate,      // 10/8, 172.16/12, 192.168/16 (RFC 1918), fc00::/7 (unique local)
  kLinkLocal,    // 169.254/16 (the metadata address 169.254.169.254), fe80::/10
  kCgnat,        // 100.64/10 (RFC 6598)
  kMulticast,    // 224/4, ff00::/8
  kReserved,     // 192.0.0/24, 198.18/15 (benchmarking), 240/4 and broadcast, and IPv6 without a meaning here
};

// The IPv4 ranges that are not public, with their class: what classify_v4 answers from,
// and what `--net internet`'s packet filter refuses (nat_helper.cc writes it from this).
struct V4Range {
  uint32_t network;  // host byte order
  int prefix;
  AddressClass what;
};
extern const V4Range kBlockedV4[11];
std::string v4_range_text(const V4Range& r);  // "10.0.0.0/8"

// The class of an IPv4 address in host byte order.
AddressClass classify_v4(uint32_t address);
// The class of an IPv6 address; an IPv4-mapped (::ffff:0:0/96), NAT64 (64:ff9b::/96) or
// 6to4 (2002::/16) address is the class of the IPv4 address inside it.
AddressClass classify_v6(const in6_addr& address);
AddressClass classify(const sockaddr_storage& address);
// A literal ("10.0.0.1", "::1"); nullopt if `text` is not one.
std::optional<AddressClass> classify_literal(std::string_view text);

bool is_blocked(AddressClass c);
// "loopback", "private (RFC 1918 or unique-local)", ...: for denial messages.
std::string_view class_name(AddressClass c);
// The numeric form of an address ("10.0.0.1", "::1").
std::string address_text(const sockaddr_storage& address);

}  // namespace nsbox::net
