// Port forwards (docs/semantics.md, "Ports") through the command line: a server listening
// on the sandbox's 127.0.0.1:P is reached at a loopback port of the host, with bytes
// passed both ways in full (an end of input included), for a sandbox with no network;
// a port nothing listens on closes the connection; only loopback addresses listen;
// bounded in number; gone once the sandbox stops. The forward is one way: the host's
// side is not reachable from inside.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <random>
#include <string>
#include <thread>

#include "isolation/sys/unique_fd.h"
#include "tests/support/host_features.h"
#include "tests/support/nsbox_cli.h"

using namespace nsbox::test;
using nlohmann::json;
using nsbox::UniqueFd;

namespace {

// Echoes each connection's bytes back until its end, then ends its own side.
const char* kEchoServer =
    "import socket, sys, threading\n"
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(64)\n"
    "def echo(c):\n"
    "    while True:\n"
    "        b = c.recv(65536)\n"
    "        if not b: break\n"
    "        c.sendall(b)\n"
    "    c.shutdown(socket.SHUT_WR); c.close()\n"
    "while True:\n"
    "    c, _ = s.accept(); threading.Thread(target=echo, args=(c,), daemon=True).start()\n";

UniqueFd connect_to(const std::string& host, uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(fd);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port = htons(port);
  REQUIRE(::inet_pton(AF_INET, host.c_str(), &at.sin_addr) == 1);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&at), sizeof at) != 0) return UniqueFd();
  return fd;
}

// Everything `fd` sends until its end, or until `timeout_ms` without a byte.
std::string read_to_end(int fd, int timeout_ms = 10000) {
  std::string got;
  char buf[65536];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) != 1) return got + "<timeout>";
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return got;
    got.append(buf, static_cast<size_t>(n));
  }
}

// `data` through a forward to the echo server: written while the echo is read (the
// buffers on the way are smaller than `data`), then the end of input; what came back.
std::string echo_through(const std::string& host, uint16_t port, const std::string& data) {
  UniqueFd fd = connect_to(host, port);
  if (!fd) return "<refused>";
  std::string got;
  std::thread writer([&] {
    size_t sent = 0;
    while (sent < data.size()) {
      ssize_t n = ::send(fd.get(), data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    ::shutdown(fd.get(), SHUT_WR);
  });
  got = read_to_end(fd.get());
  writer.join();
  return got;
}

std::pair<std::string, uint16_t> split_address(const std::string& line) {
  auto colon = line.rfind(':');
  REQUIRE(colon != std::string::npos);
  return {line.substr(0, colon), static_cast<uint16_t>(std::stoi(line.substr(colon + 1)))};
}

// Starts the echo server on `port` inside and forwards it; waits (bounded) until an echo
// comes back through the forward.
std::pair<std::string, uint16_t> echo_forward(TestRoot& root, const std::string& id, int port) {
  REQUIRE(root.sh(id, std::string("cat > /home/user/echo.py <<'EOF'\n") + kEchoServer + "EOF\n").exit_code == 0);
  root.start_command({"spawn", id}, {}, {"python3", "/home/user/echo.py", std::to_string(port)});
  auto r = root.nsbox({"port", id, std::to_string(port)});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto at = split_address(r.out.substr(0, r.out.find('\n')));
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (echo_through(at.first, at.second, "ping") != "ping" && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  REQUIRE(echo_through(at.first, at.second, "ping") == "ping");
  return at;
}

}  // namespace

TEST_CASE("a port of a sandbox without a network is reached from the host, 8 MiB each way and the end of input") {
  TestRoot root;
  auto id = root.create();
  auto at = echo_forward(root, id, 7000);
  CHECK(at.first == "127.0.0.1");
  CHECK(at.second != 7000);

  std::string data(8 << 20, '\0');
  std::mt19937 random(7);
  for (auto& c : data) c = static_cast<char>(random());
  CHECK(echo_through(at.first, at.second, data) == data);

  // Asked again: the same forward. Listed, and in the record.
  auto again = root.nsbox({"port", id, "7000"});
  CHECK(again.out == at.first + ":" + std::to_string(at.second) + "\n");
  CHECK(root.nsbox({"port", id}).out == "7000 -> " + again.out);
  auto record = TestRoot::json(root.nsbox({"inspect", "--json", id}));
  REQUIRE(record["ports"].size() == 1);
  CHECK(record["ports"][0] == json({{"port", 7000}, {"host", "127.0.0.1"}, {"host_port", at.second}}));

  // Several at once.
  std::vector<std::thread> clients;
  std::vector<std::string> answers(8);
  for (size_t i = 0; i < answers.size(); ++i)
    clients.emplace_back([&, i] { answers[i] = echo_through(at.first, at.second, std::string(300000, static_cast<char>('a' + i))); });
  for (auto& t : clients) t.join();
  for (size_t i = 0; i < answers.size(); ++i) CHECK(answers[i] == std::string(300000, static_cast<char>('a' + i)));

  // One way only: inside, the host's side of the forward is nobody's port.
  auto inside = root.sh(id, "python3 -c \"import socket; socket.create_connection(('127.0.0.1', " + std::to_string(at.second) +
                                "), 5)\" 2>&1 | tail -1");
  CHECK(inside.out.find("ConnectionRefusedError") != std::string::npos);

  // Closed: the host's port no longer answers; closing again says it is not forwarded.
  REQUIRE(root.nsbox({"port", id, "7000", "--close"}).exit_code == 0);
  CHECK_FALSE(connect_to(at.first, at.second));
  auto twice = root.nsbox({"port", id, "7000", "--close"});
  CHECK(twice.exit_code == 1);
  CHECK(twice.err.find("port 7000 is not forwarded") != std::string::npos);
  CHECK(root.nsbox({"port", id}).out == "");
}

TEST_CASE("a forwarded port nothing listens on closes each connection, and the forwards go when the sandbox stops") {
  TestRoot root;
  auto id = root.create({"--lazy-kernel"});
  auto r = root.nsbox({"port", "--json", id, "9"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto forward = TestRoot::json(r);
  UniqueFd fd = connect_to("127.0.0.1", forward["host_port"].get<uint16_t>());
  REQUIRE(fd);
  CHECK(read_to_end(fd.get()) == "");  // closed at once: refused inside

  // Another address of the host's loopback, at a port of our choosing.
  UniqueFd probe(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof any;
  REQUIRE(::bind(probe.get(), reinterpret_cast<sockaddr*>(&any), sizeof any) == 0);
  REQUIRE(::getsockname(probe.get(), reinterpret_cast<sockaddr*>(&any), &length) == 0);
  const std::string free_port = std::to_string(ntohs(any.sin_port));
  probe.reset();
  auto chosen = root.nsbox({"port", id, "10", "--listen", "127.0.0.2:" + free_port});
  INFO(chosen.err);
  CHECK(chosen.out == "127.0.0.2:" + free_port + "\n");

  // Refused: a non-loopback address, port 0, a port forwarded elsewhere already.
  auto open = root.nsbox({"port", id, "11", "--listen", "0.0.0.0:0"});
  CHECK(open.exit_code == 2);  // a usage error
  CHECK(open.err.find("a port forward listens on a loopback address, not '0.0.0.0'") != std::string::npos);
  CHECK(root.nsbox({"port", id, "0"}).err.find("PORT must be a port number from 1 to 65535") != std::string::npos);
  auto moved = root.nsbox({"port", id, "10", "--listen", "127.0.0.3:0"});
  CHECK(moved.exit_code == 1);
  CHECK(moved.err.find("port 10 is forwarded from 127.0.0.2:" + free_port) != std::string::npos);

  // At most 16 a sandbox.
  for (int p = 100; p < 114; ++p) REQUIRE(root.nsbox({"port", id, std::to_string(p)}).exit_code == 0);
  auto past = root.nsbox({"port", id, "200"});
  CHECK(past.exit_code == 1);
  CHECK(past.err.find("a sandbox has at most 16 port forwards") != std::string::npos);

  REQUIRE(root.nsbox({"stop", id}).exit_code == 0);
  CHECK(TestRoot::json(root.nsbox({"inspect", "--json", id}))["ports"] == json::array());
  CHECK_FALSE(connect_to("127.0.0.1", forward["host_port"].get<uint16_t>()));
  auto stopped = root.nsbox({"port", id, "9"});
  CHECK(stopped.exit_code == 1);
  CHECK(stopped.err.find("is stopped") != std::string::npos);
}

TEST_CASE("rootless: a port forward reaches an ordinary user's sandbox", "[rootless]") {
  NSBOX_NEEDS(unprivileged_user_namespaces());
  auto user = rootless_user();
  REQUIRE(user);
  TestRoot root(user);
  auto created = root.nsbox({"create", "--json", "--lazy-kernel"});
  INFO(created.err);
  REQUIRE(created.exit_code == 0);
  auto id = TestRoot::json(created)["id"].get<std::string>();
  auto at = echo_forward(root, id, 7000);
  CHECK(echo_through(at.first, at.second, std::string(1 << 20, 'r')) == std::string(1 << 20, 'r'));
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}
