// A network namespace the test makes, standing in for the internet: nothing sent into it
// can leave the machine. It holds a "public" host at a documentation address
// (198.51.100.10) and a private one (10.9.9.9) on its loopback, a web server on both
// (every address, `port`), and a DNS server at the address of the host's resolver (the
// first IPv4 nameserver of /etc/resolv.conf, what slirp4netns forwards to and
// getaddrinfo asks), answering a name given in `names` with its address and any other
// with the public host's. Host-side network helpers are started in it by the test-hooks
// CLI (NSBOX_TEST_NETNS, tests/support/nsbox_cli.h). Root only (unshare -n).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "tests/support/nsbox_cli.h"

namespace nsbox::test {

class TestNetwork {
 public:
  static constexpr const char* kPublicHost = "198.51.100.10";
  static constexpr const char* kPrivateHost = "10.9.9.9";

  explicit TestNetwork(const std::map<std::string, std::string>& names = {});
  ~TestNetwork();
  TestNetwork(const TestNetwork&) = delete;
  TestNetwork& operator=(const TestNetwork&) = delete;

  // "NSBOX_TEST_NETNS=<path>": for ProcessOptions::extra_env of a create.
  std::string hook() const { return "NSBOX_TEST_NETNS=" + netns; }

  std::string netns;  // /proc/<pid>/ns/net of the process holding it
  int port = 0;       // the web server's

 private:
  BackgroundProcess holder_;
  std::unique_ptr<BackgroundProcess> server_, dns_;
};

}  // namespace nsbox::test
