#include "tests/support/test_network.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <vector>

namespace nsbox::test {

TestNetwork::TestNetwork(const std::map<std::string, std::string>& names)
    : holder_({"/usr/bin/unshare", "-n", "/bin/sleep", "900"}, {.stdin_is_null = false}) {
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
                         std::string("/bin/ip link set lo up && /bin/ip addr add ") + kPublicHost + "/32 dev lo && /bin/ip addr add " +
                             kPrivateHost + "/32 dev lo"});
  REQUIRE(up.exit_code == 0);
  server_ = std::make_unique<BackgroundProcess>(
      std::vector<std::string>{"/usr/bin/nsenter", "--net=" + netns, "/usr/bin/python3.11", "-u", "-m", "http.server", "0", "--bind",
                               "0.0.0.0", "--directory", "/usr/share/doc/curl"},
      ProcessOptions{.stdin_is_null = false});
  REQUIRE(server_->wait_for_output("port ", 30));
  std::string out = server_->output();
  port = std::stoi(out.substr(out.find("port ") + 5));
  // A host with no IPv4 resolver has no DNS in `--net internet` (slirp4netns forwards to
  // an IPv4 one only): a failure of the tests that need it, not a skip.
  auto resolver = run_process({"/bin/sh", "-c", "awk '/^nameserver [0-9.]+$/ {print $2; exit}' /etc/resolv.conf"});
  std::string ns = resolver.out.substr(0, resolver.out.find('\n'));
  INFO("the host's /etc/resolv.conf names no IPv4 resolver");
  REQUIRE(!ns.empty());
  if (ns.rfind("127.", 0) != 0)
    REQUIRE(run_process({"/usr/bin/nsenter", "--net=" + netns, "/bin/ip", "addr", "add", ns + "/32", "dev", "lo"}).exit_code == 0);
  std::vector<std::string> dns = {"/usr/bin/nsenter", "--net=" + netns, "/usr/bin/python3.11",
                                  std::string(NSBOX_SOURCE_DIR) + "/tests/peers/fake_dns.py", "--listen", ns, "--answer", kPublicHost};
  for (const auto& [name, address] : names) {
    dns.push_back("--name");
    dns.push_back(name + "=" + address);
  }
  dns_ = std::make_unique<BackgroundProcess>(dns, ProcessOptions{.stdin_is_null = false});
  REQUIRE(dns_->wait_for_output("ready", 30));
}

TestNetwork::~TestNetwork() {
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

}  // namespace nsbox::test
