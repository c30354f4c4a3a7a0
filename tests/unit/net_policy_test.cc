// The network policy's pure parts (docs/network.md): the address classifier, with literal
// addresses only (nothing connects), the allowlist's syntax and matching (and a package
// index's place in it), and the parsers of what a sandbox sends its egress proxy.
#include <catch2/catch.hpp>

#include <string>

#include "runtime/core/address_class.h"
#include "runtime/core/net_policy.h"
#include "runtime/netproxy/proxy_parsers.h"
#include "runtime/core/package_sources.h"

using namespace nsbox;
using namespace nsbox::net;

TEST_CASE("the address classifier blocks every range that reaches the host, its LAN or the metadata service") {
  struct Case {
    const char* address;
    AddressClass expected;
  };
  const Case cases[] = {
      {"0.0.0.0", AddressClass::kUnspecified},      {"0.1.2.3", AddressClass::kUnspecified},
      {"127.0.0.1", AddressClass::kLoopback},       {"127.255.255.254", AddressClass::kLoopback},
      {"10.0.0.1", AddressClass::kPrivate},         {"10.255.255.255", AddressClass::kPrivate},
      {"172.16.0.1", AddressClass::kPrivate},       {"172.31.255.255", AddressClass::kPrivate},
      {"172.32.0.1", AddressClass::kPublic},        {"172.15.255.255", AddressClass::kPublic},
      {"192.168.1.1", AddressClass::kPrivate},      {"169.254.169.254", AddressClass::kLinkLocal},
      {"100.64.0.1", AddressClass::kCgnat},         {"100.127.255.255", AddressClass::kCgnat},
      {"100.128.0.1", AddressClass::kPublic},       {"224.0.0.1", AddressClass::kMulticast},
      {"239.255.255.250", AddressClass::kMulticast}, {"192.0.0.8", AddressClass::kReserved},
      {"198.18.0.1", AddressClass::kReserved},      {"198.19.255.255", AddressClass::kReserved},
      {"240.0.0.1", AddressClass::kReserved},       {"255.255.255.255", AddressClass::kReserved},
      {"8.8.8.8", AddressClass::kPublic},           {"198.51.100.10", AddressClass::kPublic},
      {"::", AddressClass::kUnspecified},           {"::1", AddressClass::kLoopback},
      {"fc00::1", AddressClass::kPrivate},          {"fd12:3456::1", AddressClass::kPrivate},
      {"fe80::1", AddressClass::kLinkLocal},        {"ff02::1", AddressClass::kMulticast},
      {"::ffff:127.0.0.1", AddressClass::kLoopback}, {"::ffff:10.1.2.3", AddressClass::kPrivate},
      {"::ffff:169.254.169.254", AddressClass::kLinkLocal}, {"::ffff:8.8.8.8", AddressClass::kPublic},
      {"64:ff9b::10.0.0.1", AddressClass::kPrivate}, {"64:ff9b::7f00:1", AddressClass::kLoopback},
      {"64:ff9b::808:808", AddressClass::kPublic},  {"2002:c0a8:0101::1", AddressClass::kPrivate},
      {"2002:7f00:1::", AddressClass::kLoopback},   {"2002:0808:0808::1", AddressClass::kPublic},
      {"2001:db8::1", AddressClass::kPublic},       {"2606:4700::1111", AddressClass::kPublic},
      {"::127.0.0.1", AddressClass::kReserved},     {"fec0::1", AddressClass::kReserved},
      {"[::1]", AddressClass::kLoopback},
  };
  for (const auto& c : cases) {
    INFO(c.address);
    auto got = classify_literal(c.address);
    REQUIRE(got);
    CHECK(*got == c.expected);
    CHECK(is_blocked(*got) == (c.expected != AddressClass::kPublic));
  }
  CHECK(!classify_literal("example.com"));
  CHECK(!classify_literal("1.2.3"));
}

TEST_CASE("an allowlist holds hosts, wildcards and ports, and matches names as DNS compares them") {
  auto p = NetPolicy::parse("allow=PyPI.org,*.pythonhosted.org, api.example.com:8443,[::1]:9000,10.0.0.5");
  REQUIRE(p);
  CHECK(p->mode == network::Mode::kAllow);
  auto listed = AllowList::parse("PyPI.org,*.pythonhosted.org, api.example.com:8443,[::1]:9000,10.0.0.5", "10.0.0.5");
  REQUIRE(listed);
  CHECK(listed->entries.size() == p->allow.entries.size());
  p->allow = *listed;
  const AllowList& a = p->allow;
  CHECK(a.match("pypi.org", 443) != nullptr);
  CHECK(a.match("PYPI.ORG.", 80) != nullptr);
  CHECK(a.match("pypi.org", 8080) == nullptr);  // no port: 80 and 443 only
  CHECK(a.match("files.pythonhosted.org", 443)->text() == "*.pythonhosted.org");
  CHECK(a.match("pythonhosted.org", 443) == nullptr);  // a wildcard is under the domain only
  CHECK(a.match("evilpythonhosted.org", 443) == nullptr);
  CHECK(a.match("api.example.com", 8443) != nullptr);
  CHECK(a.match("api.example.com", 443) == nullptr);
  CHECK(a.match("::1", 9000) != nullptr);
  CHECK(a.match("pypi.org.evil.com", 443) == nullptr);
  CHECK(a.private_allowed("10.0.0.5"));
  CHECK(!a.private_allowed("pypi.org"));
  // The saved form comes back the same.
  auto again = NetPolicy::from_json(p->to_json());
  REQUIRE(again);
  CHECK(again->to_json() == p->to_json());
  CHECK(NetPolicy::from_json("none")->mode == network::Mode::kNone);
  CHECK(NetPolicy::from_json("host")->mode == network::Mode::kHost);
  CHECK(NetPolicy::from_json("allow=a.io")->allow.match("a.io", 443));

  for (const char* bad : {"allow=*.com", "allow=a.io..", "allow=a.io:0", "allow=a.io:70000", "allow=a b.io", "allow=[::1", "allow", "public"}) {
    INFO(bad);
    auto r = NetPolicy::parse(bad);
    REQUIRE(!r);
    CHECK(r.error().code == ErrorCode::kInvalidArgument);
  }
  // The longest domain a wildcard may name leaves room for one label under it.
  std::string domain = "a." + std::string(249, 'b');  // 251 characters
  auto longest = AllowList::parse("*." + domain, "");
  REQUIRE(longest);
  CHECK(longest->match("x." + domain, 443) != nullptr);
  auto too_long = AllowList::parse("*.b" + domain, "");
  REQUIRE(!too_long);
  CHECK(too_long.error().message.find("can match no name: its domain has 252 characters") != std::string::npos);
  auto not_listed = AllowList::parse("a.io", "b.io");
  REQUIRE(!not_listed);
  CHECK(not_listed.error().message.find("not a host of the allowlist") != std::string::npos);
  CHECK(!NetPolicy::from_json(nlohmann::json{{"allow", "a.io"}}));
  CHECK(!NetPolicy::from_json(nlohmann::json{{"allow", {"a.io"}}, {"deny", {"b.io"}}}));
}

TEST_CASE("the proxy reads CONNECT and absolute-form requests, and refuses what it does not serve") {
  std::string error;
  auto c = parse_request_head("CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n", error);
  REQUIRE(c);
  CHECK(c->connect);
  CHECK(c->host == "pypi.org");
  CHECK(c->port == 443);
  auto v6 = parse_request_head("CONNECT [2001:db8::1]:8443 HTTP/1.1\r\n\r\n", error);
  REQUIRE(v6);
  CHECK(v6->host == "2001:db8::1");
  CHECK(v6->port == 8443);

  auto g = parse_request_head("GET http://example.com:8080/a/b?q=1 HTTP/1.1\r\nHost: example.com:8080\r\n"
                              "Proxy-Connection: keep-alive\r\nProxy-Authorization: Basic eA==\r\nAccept: */*\r\n\r\n",
                              error);
  REQUIRE(g);
  CHECK(!g->connect);
  CHECK(g->host == "example.com");
  CHECK(g->port == 8080);
  CHECK(g->upstream_head == "GET /a/b?q=1 HTTP/1.1\r\nHost: example.com:8080\r\nAccept: */*\r\n\r\n");
  auto bare = parse_request_head("GET http://example.com HTTP/1.0\r\n\r\n", error);
  REQUIRE(bare);
  CHECK(bare->port == 80);
  CHECK(bare->upstream_head == "GET / HTTP/1.0\r\n\r\n");

  // The Host the upstream serves is the URL's: another one is domain fronting (issue 33,
  // finding 8), refused with what it was.
  auto same = parse_request_head("GET http://Allowed.Test./x HTTP/1.1\r\nhost:  allowed.test:80 \r\n\r\n", error);
  CHECK(same);
  for (const char* fronting : {"GET http://allowed.test/ HTTP/1.1\r\nHost: metadata.google.internal\r\n\r\n",
                               "GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test:8080\r\n\r\n",
                               "GET http://allowed.test:8080/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
                               "GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\nHost: 169.254.169.254\r\n\r\n",
                               "GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test@evil.test\r\n\r\n"}) {
    INFO(fronting);
    error.clear();
    CHECK(!parse_request_head(fronting, error));
    CHECK((error == "the Host header names another host than the URL" || error == "more than one Host header"));
  }

  for (const char* bad : {"GET /x HTTP/1.1\r\n\r\n", "GET https://a.io/ HTTP/1.1\r\n\r\n", "CONNECT a.io HTTP/1.1\r\n\r\n",
                          "GET http://user:pw@a.io/ HTTP/1.1\r\n\r\n", "GET http://a.io/ SPDY/3\r\n\r\n", "garbage\r\n\r\n",
                          "CONNECT a.io:99999 HTTP/1.1\r\n\r\n"}) {
    INFO(bad);
    error.clear();
    CHECK(!parse_request_head(bad, error));
    CHECK(!error.empty());
  }
}

namespace {

// A TLS 1.2-style ClientHello in one record, with a server_name extension when `sni` is set.
std::string client_hello(const std::string& sni, size_t padding = 0) {
  auto u16 = [](size_t v) { return std::string{char(v >> 8), char(v & 0xff)}; };
  std::string ext;
  if (!sni.empty()) {
    std::string name = std::string(1, '\0') + u16(sni.size()) + sni;
    std::string list = u16(name.size()) + name;
    ext += u16(0) + u16(list.size()) + list;
  }
  if (padding) ext += u16(21) + u16(padding) + std::string(padding, '\0');  // padding extension
  std::string body = "\x03\x03" + std::string(32, 'r') + std::string(1, '\0') + u16(2) + "\x13\x01" + "\x01" + std::string(1, '\0') +
                     u16(ext.size()) + ext;
  std::string hs = std::string(1, '\x01') + '\0' + u16(body.size()) + body;
  std::string out;
  for (size_t at = 0; at < hs.size(); at += 16384) {  // split into records as TLS does
    std::string part = hs.substr(at, 16384);
    out += std::string("\x16\x03\x01", 3) + u16(part.size()) + part;
  }
  return out;
}

}  // namespace

TEST_CASE("the proxy finds the server name of a TLS ClientHello, across records and in pieces") {
  std::string name;
  CHECK(parse_client_hello(client_hello("pypi.org"), name) == HelloStatus::kDone);
  CHECK(name == "pypi.org");
  CHECK(parse_client_hello(client_hello(""), name) == HelloStatus::kDone);
  CHECK(name.empty());
  std::string big = client_hello("files.example.com", 20000);  // two records
  CHECK(parse_client_hello(big, name) == HelloStatus::kDone);
  CHECK(name == "files.example.com");
  for (size_t cut : {size_t{0}, size_t{3}, size_t{5}, size_t{40}, big.size() - 1})
    CHECK(parse_client_hello(big.substr(0, cut), name) == HelloStatus::kNeedMore);
  CHECK(parse_client_hello("GET / HTTP/1.1\r\n\r\n", name) == HelloStatus::kNotTls);
  CHECK(parse_client_hello(std::string("\x16\x03\x01\x00\x05\x02\x00\x00\x01\x00", 10), name) == HelloStatus::kMalformed);
  std::string lying = client_hello("a.io");
  lying[lying.size() - 6] = '\x7f';  // the name's length past its end
  CHECK(parse_client_hello(lying, name) != HelloStatus::kDone);
}

TEST_CASE("a package index opens the network for exactly its host, and may be one of the private names") {
  PackageSources index;
  index.pip_index = "http://pypi.test:8080/simple";
  auto none = index.network_policy("none");
  REQUIRE(none);
  CHECK(none->mode == network::Mode::kAllow);
  CHECK(none->allow.to_json()["allow"] == nlohmann::json::array({"pypi.test:8080"}));
  auto with_private = index.network_policy({{"allow", nlohmann::json::array()}, {"allow_private", {"pypi.test"}}});
  REQUIRE(with_private);
  CHECK(with_private->allow.private_allowed("pypi.test"));
  auto grown = index.network_policy("allow=files.example.com");
  REQUIRE(grown);
  CHECK(grown->allow.entries.size() == 2);
  CHECK(index.network_policy("host")->mode == network::Mode::kHost);  // host reaches it already
  // Without an index, a private name must be a host of the list.
  PackageSources offline;
  auto refused = offline.network_policy({{"allow", nlohmann::json::array()}, {"allow_private", {"pypi.test"}}});
  REQUIRE(!refused);
  CHECK(refused.error().message.find("not a host of the allowlist") != std::string::npos);
  CHECK(offline.network_policy("none")->mode == network::Mode::kNone);
  CHECK(!PackageSources::from_json({{"pip_index", "http://user:pw@pypi.test/simple"}}));
  CHECK(!PackageSources::from_json({{"pip_index", "ftp://pypi.test/simple"}}));
}
