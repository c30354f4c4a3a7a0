#include "runtime/core/address_class.h"

#include <arpa/inet.h>

#include <cstring>

namespace nsbox::net {
namespace {

bool in_v4(uint32_t address, uint32_t network, int prefix) {
  uint32_t mask = prefix == 0 ? 0 : ~uint32_t{0} << (32 - prefix);
  return (address & mask) == (network & mask);
}

constexpr uint32_t v4(unsigned a, unsigned b, unsigned c, unsigned d) { return a << 24 | b << 16 | c << 8 | d; }

uint32_t v4_at(const in6_addr& a, int offset) {
  return uint32_t{a.s6_addr[offset]} << 24 | uint32_t{a.s6_addr[offset + 1]} << 16 | uint32_t{a.s6_addr[offset + 2]} << 8 |
         a.s6_addr[offset + 3];
}

bool starts_with_bytes(const in6_addr& a, std::initializer_list<uint8_t> prefix) {
  return std::memcmp(a.s6_addr, prefix.begin(), prefix.size()) == 0;
}

}  // namespace

const V4Range kBlockedV4[11] = {
    {v4(0, 0, 0, 0), 8, AddressClass::kUnspecified},   {v4(127, 0, 0, 0), 8, AddressClass::kLoopback},
    {v4(10, 0, 0, 0), 8, AddressClass::kPrivate},      {v4(172, 16, 0, 0), 12, AddressClass::kPrivate},
    {v4(192, 168, 0, 0), 16, AddressClass::kPrivate},  {v4(169, 254, 0, 0), 16, AddressClass::kLinkLocal},
    {v4(100, 64, 0, 0), 10, AddressClass::kCgnat},     {v4(224, 0, 0, 0), 4, AddressClass::kMulticast},
    {v4(192, 0, 0, 0), 24, AddressClass::kReserved},   {v4(198, 18, 0, 0), 15, AddressClass::kReserved},
    {v4(240, 0, 0, 0), 4, AddressClass::kReserved},  // holds 255.255.255.255
};

std::string v4_range_text(const V4Range& r) {
  return std::to_string(r.network >> 24) + "." + std::to_string(r.network >> 16 & 0xff) + "." +
         std::to_string(r.network >> 8 & 0xff) + "." + std::to_string(r.network & 0xff) + "/" + std::to_string(r.prefix);
}

AddressClass classify_v4(uint32_t a) {
  for (const auto& r : kBlockedV4)
    if (in_v4(a, r.network, r.prefix)) return r.what;
  return AddressClass::kPublic;
}

AddressClass classify_v6(const in6_addr& a) {
  static const in6_addr any = IN6ADDR_ANY_INIT, loopback = IN6ADDR_LOOPBACK_INIT;
  if (std::memcmp(&a, &any, sizeof a) == 0) return AddressClass::kUnspecified;
  if (std::memcmp(&a, &loopback, sizeof a) == 0) return AddressClass::kLoopback;
  // ::ffff:a.b.c.d (mapped), 64:ff9b::a.b.c.d (NAT64), 2002:aabb:ccdd::/48 (6to4): the
  // IPv4 address inside decides.
  if (starts_with_bytes(a, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff})) return classify_v4(v4_at(a, 12));
  if (starts_with_bytes(a, {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0})) return classify_v4(v4_at(a, 12));
  if (starts_with_bytes(a, {0x20, 0x02})) return classify_v4(v4_at(a, 2));
  if ((a.s6_addr[0] & 0xfe) == 0xfc) return AddressClass::kPrivate;                           // fc00::/7
  if (a.s6_addr[0] == 0xfe && (a.s6_addr[1] & 0xc0) == 0x80) return AddressClass::kLinkLocal;  // fe80::/10
  if (a.s6_addr[0] == 0xff) return AddressClass::kMulticast;
  // Global unicast is 2000::/3; the rest (the old IPv4-compatible ::/96, site-local
  // fec0::/10, discard 100::/64, ...) has no business here.
  if ((a.s6_addr[0] & 0xe0) == 0x20) return AddressClass::kPublic;
  return AddressClass::kReserved;
}

AddressClass classify(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET)
    return classify_v4(ntohl(reinterpret_cast<const sockaddr_in&>(address).sin_addr.s_addr));
  if (address.ss_family == AF_INET6) return classify_v6(reinterpret_cast<const sockaddr_in6&>(address).sin6_addr);
  return AddressClass::kReserved;
}

std::optional<AddressClass> classify_literal(std::string_view text) {
  std::string s(text);
  if (s.size() > 2 && s.front() == '[' && s.back() == ']') s = s.substr(1, s.size() - 2);
  in_addr a4{};
  if (::inet_pton(AF_INET, s.c_str(), &a4) == 1) return classify_v4(ntohl(a4.s_addr));
  in6_addr a6{};
  if (::inet_pton(AF_INET6, s.c_str(), &a6) == 1) return classify_v6(a6);
  return std::nullopt;
}

bool is_blocked(AddressClass c) { return c != AddressClass::kPublic; }

std::string_view class_name(AddressClass c) {
  switch (c) {
    case AddressClass::kPublic: return "public";
    case AddressClass::kUnspecified: return "unspecified";
    case AddressClass::kLoopback: return "loopback";
    case AddressClass::kPrivate: return "private (RFC 1918 or unique-local)";
    case AddressClass::kLinkLocal: return "link-local (the cloud metadata range)";
    case AddressClass::kCgnat: return "carrier-grade NAT (100.64/10)";
    case AddressClass::kMulticast: return "multicast";
    case AddressClass::kReserved: return "reserved";
  }
  return "reserved";
}

std::string address_text(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(address).sin_addr, text, sizeof text);
  else if (address.ss_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(address).sin6_addr, text, sizeof text);
  return text;
}

}  // namespace nsbox::net
