// Network modes: none (own namespace, loopback only) and host.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "tests/support/nsbox_cli.h"

using namespace nsbox::test;

namespace {

// A TCP listener on the host's loopback, port chosen by the kernel.
struct HostListener {
  int fd = -1;
  int port = 0;
  HostListener() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd, 4) == 0);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~HostListener() { ::close(fd); }
  bool got_connection() {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
  }
};

const char* kConnect =
    "python3 -c 'import socket,sys\n"
    "try:\n"
    "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3); print(\"connected\")\n"
    "except OSError as e: print(e.errno)' ";

}  // namespace

TEST_CASE("network mode none: only loopback, up, nothing outside the sandbox is reachable") {
  TestRoot root;
  auto id = root.create();
  HostListener host;
  auto ifaces = root.sh(id, "ls /proc/sys/net/ipv4/conf | grep -v -e all -e default");
  CHECK(ifaces.out == "lo\n");
  // The host's loopback listener is not the sandbox's loopback.
  CHECK(root.sh(id, std::string(kConnect) + "127.0.0.1 " + std::to_string(host.port)).out == "111\n");  // ECONNREFUSED
  CHECK_FALSE(host.got_connection());
  CHECK(root.sh(id, std::string(kConnect) + "1.1.1.1 53").out == "101\n");    // ENETUNREACH
  CHECK(root.sh(id, std::string(kConnect) + "10.0.0.1 80").out == "101\n");
  // Loopback inside works.
  auto lo = root.sh(id, "python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); s.listen(); "
                        "c=socket.create_connection(s.getsockname()); print(\"loopback ok\")'");
  CHECK(lo.out == "loopback ok\n");
}

TEST_CASE("network mode host: the host's network is reachable") {
  TestRoot root;
  auto id = root.create({"--net", "host"});
  HostListener host;
  auto r = root.sh(id, std::string(kConnect) + "127.0.0.1 " + std::to_string(host.port));
  CHECK(r.out == "connected\n");
  CHECK(host.got_connection());
  CHECK(TestRoot::json(root.nsbox({"inspect", "--json", id}))["net"] == "host");
}

TEST_CASE("an unknown network mode is refused") {
  TestRoot root;
  auto r = root.nsbox({"create", "--net", "bridge"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("unknown network mode 'bridge'") != std::string::npos);
  CHECK(TestRoot::json(root.nsbox({"ls", "--json"}))["sandboxes"].empty());
}
