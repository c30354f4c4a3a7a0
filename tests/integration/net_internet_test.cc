// `--net internet` end to end (docs/network.md): NAT through slirp4netns, with the ranges
// that reach the host, a LAN or the metadata service refused by rules the sandbox cannot
// change. The NAT helper runs in a network namespace the test makes (NSBOX_TEST_NAT_NETNS),
// which holds a "public" test host at a documentation address (198.51.100.10) and a
// private one (10.9.9.9) on its loopback and has no other interface: nothing the sandbox
// sends can leave the machine, even if a rule were wrong.
#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/support/host_features.h"
#include "tests/support/nsbox_cli.h"

using namespace nsbox::test;
using nlohmann::json;

namespace {

// A network namespace held by a sleeping process, with the test hosts and a web server.
class TestInternet {
 public:
  TestInternet() : holder_({"/usr/bin/unshare", "-n", "/bin/sleep", "900"}, {.stdin_is_null = false}) {
    netns = "/proc/" + std::to_string(holder_.pid()) + "/ns/net";
    // Until unshare has run, the holder is still in our namespace: never configure that.
    struct stat ours{}, theirs{};
    REQUIRE(::stat("/proc/self/ns/net", &ours) == 0);
    bool separate = false;
    for (int i = 0; i < 500 && !separate; ++i) {
      separate = ::stat(netns.c_str(), &theirs) == 0 && theirs.st_ino != ours.st_ino;
      if (!separate) ::usleep(10000);
    }
    REQUIRE(separate);
    auto up = run_process({"/usr/bin/nsenter", "--net=" + netns, "/bin/sh", "-c",
                           "/bin/ip link set lo up && /bin/ip addr add 198.51.100.10/32 dev lo && /bin/ip addr add 10.9.9.9/32 dev lo"});
    REQUIRE(up.exit_code == 0);
    server_ = std::make_unique<BackgroundProcess>(
        std::vector<std::string>{"/usr/bin/nsenter", "--net=" + netns, "/usr/bin/python3.11", "-u", "-m", "http.server", "0", "--bind",
                                 "0.0.0.0", "--directory", "/usr/share/doc/curl"},
        ProcessOptions{.stdin_is_null = false});
    REQUIRE(server_->wait_for_output("port ", 30));
    std::string out = server_->output();
    port = std::stoi(out.substr(out.find("port ") + 5));
    // The NAT helper forwards DNS to the host's resolver: the namespace answers for it
    // (every name is the public test host), when that resolver is an IPv4 address.
    auto resolver = run_process({"/bin/sh", "-c", "awk '/^nameserver [0-9.]+$/ {print $2; exit}' /etc/resolv.conf"});
    std::string ns = resolver.out.substr(0, resolver.out.find('\n'));
    if (!ns.empty() && (ns.rfind("127.", 0) == 0 ||
                        run_process({"/usr/bin/nsenter", "--net=" + netns, "/bin/ip", "addr", "add", ns + "/32", "dev", "lo"}).exit_code == 0)) {
      dns_ = std::make_unique<BackgroundProcess>(
          std::vector<std::string>{"/usr/bin/nsenter", "--net=" + netns, "/usr/bin/python3.11",
                                   std::string(NSBOX_SOURCE_DIR) + "/tests/peers/fake_dns.py", "--listen", ns, "--answer",
                                   "198.51.100.10"},
          ProcessOptions{.stdin_is_null = false});
      has_dns = dns_->wait_for_output("ready", 30);
    }
  }
  ~TestInternet() {
    if (dns_) {
      dns_->close_stdin();
      (void)dns_->wait(30);
    }
    if (server_) {
      server_->signal(SIGTERM);
      (void)server_->wait(30);
    }
    holder_.signal(SIGKILL);
    (void)holder_.wait(30);
  }
  std::string netns;
  int port = 0;
  bool has_dns = false;  // names resolve (to 198.51.100.10) through the NAT helper

 private:
  BackgroundProcess holder_;
  std::unique_ptr<BackgroundProcess> server_, dns_;
};

bool has_nat_tools() {
  return ::access("/usr/bin/slirp4netns", X_OK) == 0 && ::access("/usr/sbin/nft", X_OK) == 0 && ::access("/dev/net/tun", F_OK) == 0;
}

}  // namespace

TEST_CASE("internet: a public address is reached through NAT, and private ranges, the gateway and the host's loopback are refused",
          "[net]") {
  if (::geteuid() != 0) NSBOX_SKIP("the test's network namespace needs root (unshare -n)");
  if (!has_nat_tools()) NSBOX_SKIP("slirp4netns or nft is not installed (scripts/install-deps installs them), or there is no /dev/net/tun");
  TestInternet world;
  TestRoot root;
  auto id = root.create({"--net", "internet"}, {.extra_env = {"NSBOX_TEST_NAT_NETNS=" + world.netns}});
  std::string port = std::to_string(world.port);
  auto curl = [&](const std::string& url) {
    return root.sh(id, "curl -sS -m 10 -o /dev/null -w '%{http_code}' " + url + " 2>/dev/null; echo \" $?\"").out;
  };
  CHECK(curl("http://198.51.100.10:" + port + "/") == "200 0\n");
  CHECK(curl("http://10.9.9.9:" + port + "/") == "000 7\n");     // private: refused at once
  CHECK(curl("http://10.0.2.2:" + port + "/") == "000 7\n");     // the gateway (the host side)
  CHECK(curl("http://127.0.0.1:" + port + "/") == "000 7\n");    // the sandbox's own loopback
  CHECK(curl("http://169.254.169.254/") == "000 7\n");           // the metadata address
  // UDP to a private address is refused the same way.
  auto udp = root.sh(id, "python3 -c 'import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                         "try:\n    s.sendto(b\"x\", (\"10.9.9.9\", 53)); print(\"sent\")\nexcept OSError as e: print(e.errno)'");
  CHECK(udp.out != "sent\n");
  // The sandbox's resolver is the NAT helper's, and the rules are out of its reach.
  CHECK(root.sh(id, "cat /etc/resolv.conf").out == "nameserver 10.0.2.3\n");
  CHECK(root.sh(id, "nft flush ruleset 2>/dev/null; echo $?").out != "0\n");
  CHECK(curl("http://10.9.9.9:" + port + "/") == "000 7\n");
  // DNS works inside, through the NAT helper's forwarder.
  if (world.has_dns)
    CHECK(curl("http://upstream.example:" + port + "/") == "200 0\n");
  else
    WARN("the host's resolver is not an IPv4 address: DNS through the NAT helper was not checked");
  auto info = TestRoot::json(root.nsbox({"inspect", "--json", id}));
  CHECK(info["net"] == "internet");
  REQUIRE(root.nsbox({"rm", id}).exit_code == 0);
}
