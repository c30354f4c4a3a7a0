// `--net internet` end to end (docs/network.md): NAT through slirp4netns, with the ranges
// that reach the host, a LAN or the metadata service refused by rules the sandbox cannot
// change. The NAT helper runs in a network namespace the test makes (tests/support/
// test_network.h: a "public" test host at 198.51.100.10, a private one at 10.9.9.9, a DNS
// server, no other interface): nothing the sandbox sends can leave the machine, even if
// a rule were wrong.
#include <catch2/catch.hpp>

#include "tests/support/host_features.h"
#include "tests/support/nsbox_cli.h"
#include "tests/support/test_network.h"

using namespace nsbox::test;
using nlohmann::json;

namespace {

// A UDP datagram from Python in the sandbox: "sent", or "refused <errno>" (nothing else: a
// script that fails otherwise prints a traceback, which matches neither).
std::string udp_to(const TestRoot& root, const std::string& id, const std::string& address) {
  return root.sh(id, "python3 -c 'import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                     "try:\n    s.sendto(b\"x\", (\"" + address + "\", 53)); print(\"sent\")\n"
                     "except OSError as e: print(\"refused\", e.errno)' 2>&1").out;
}

}  // namespace

TEST_CASE("internet: a public address is reached through NAT, and private ranges, the gateway and the host's loopback are refused",
          "[net]") {
  NSBOX_NEEDS(root());  // the test's network namespace (unshare -n)
  NSBOX_NEEDS(installed("/usr/bin/slirp4netns", "slirp4netns"));
  NSBOX_NEEDS(installed("/usr/sbin/nft", "nftables"));
  NSBOX_NEEDS(tun_device());
  TestNetwork world;
  TestRoot root;
  auto id = root.create({"--net", "internet"}, {.extra_env = {world.hook()}});
  std::string port = std::to_string(world.port);
  auto curl = [&](const std::string& url) {
    return root.sh(id, "curl -sS -m 10 -o /dev/null -w '%{http_code}' " + url + " 2>/dev/null; echo \" $?\"").out;
  };
  CHECK(curl("http://198.51.100.10:" + port + "/") == "200 0\n");
  CHECK(curl("http://10.9.9.9:" + port + "/") == "000 7\n");     // private: refused at once
  CHECK(curl("http://10.0.2.2:" + port + "/") == "000 7\n");     // the gateway (the host side)
  CHECK(curl("http://127.0.0.1:" + port + "/") == "000 7\n");    // the sandbox's own loopback
  CHECK(curl("http://169.254.169.254/") == "000 7\n");           // the metadata address
  // UDP to a private address is refused the same way (the rule's reject: EPERM at the
  // send), while to a public one it goes.
  CHECK(udp_to(root, id, "198.51.100.10") == "sent\n");
  CHECK(udp_to(root, id, "10.9.9.9") == "refused 1\n");
  // The sandbox's resolver is the NAT helper's, and the rules are out of its reach: nft is
  // there (the host's, read-only) and the kernel refuses it.
  CHECK(root.sh(id, "cat /etc/resolv.conf").out == "nameserver 10.0.2.3\n");
  auto flush = root.sh(id, "/usr/sbin/nft flush ruleset; echo $?");
  INFO(flush.err);
  CHECK(flush.out == "1\n");
  CHECK(flush.err.find("Operation not permitted") != std::string::npos);
  CHECK(curl("http://10.9.9.9:" + port + "/") == "000 7\n");
  // DNS works inside, through the NAT helper's forwarder.
  CHECK(curl("http://upstream.example:" + port + "/") == "200 0\n");
  auto info = TestRoot::json(root.nsbox({"inspect", "--json", id}));
  CHECK(info["net"] == "internet");
  REQUIRE(root.nsbox({"rm", id}).exit_code == 0);
}
