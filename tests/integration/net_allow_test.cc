// `--net allow=` end to end (docs/network.md): a sandbox whose only way out is its egress
// proxy on the host side. The upstream is tests/peers/net_upstream.py on 127.0.0.1, reached
// by names the tests map to loopback (NSBOX_TEST_RESOLVE, read by the tests' nsbox-with-
// test-hooks), or a web server in a network namespace of the test's, where the proxy then
// runs and resolves names through DNS (tests/support/test_network.h): nothing leaves the
// machine, and denials are shown with names, never by connecting out.
#include <catch2/catch.hpp>
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>

#include "tests/support/host_features.h"
#include "tests/support/nsbox_cli.h"
#include "tests/support/test_network.h"

using namespace nsbox::test;
using nlohmann::json;

namespace {

class Upstream {
 public:
  Upstream()
      : process_({"/usr/bin/python3.11", std::string(NSBOX_SOURCE_DIR) + "/tests/peers/net_upstream.py"},
                 {.stdin_is_null = false}) {
    REQUIRE(process_.wait_for_output("\"https\"", 60));
    std::string out = process_.output();
    size_t at = out.find('{');
    json ports = json::parse(out.substr(at, out.find('\n', at) - at));
    http = ports.at("http").get<int>();
    https = ports.at("https").get<int>();
  }
  ~Upstream() {
    process_.close_stdin();
    (void)process_.wait(30);
  }
  int http = 0, https = 0;

 private:
  BackgroundProcess process_;
};

// `nsbox create` with the test names mapped to loopback.
ProcessOptions resolving() {
  return {.extra_env = {"NSBOX_TEST_RESOLVE=good.test=127.0.0.1,priv.test=127.0.0.1,other.test=127.0.0.1"}};
}

std::string port(int p) { return std::to_string(p); }

// curl in the sandbox: "<HTTP status> <body>" (the proxy's settings come from the environment).
std::string curl(const TestRoot& root, const std::string& id, const std::string& url, const std::string& flags = "") {
  auto r = root.sh(id, "curl " + flags + " -sS -k -m 20 -o /tmp/body -w '%{http_code} ' '" + url + "' 2>/dev/null; cat /tmp/body 2>/dev/null; rm -f /tmp/body");
  return r.out;
}

// The pids of `parent`'s children named `name`.
std::vector<pid_t> children_named(pid_t parent, const std::string& name) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  while (dirent* e = d ? ::readdir(d) : nullptr) {
    pid_t pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    std::ifstream stat("/proc/" + std::string(e->d_name) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), {});
    size_t open = text.find('('), close = text.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close + 4 > text.size()) continue;
    std::string comm = text.substr(open + 1, close - open - 1);
    pid_t ppid = std::atoi(text.c_str() + close + 4);  // ") S PPID"
    if (ppid == parent && comm == name.substr(0, 15)) out.push_back(pid);
  }
  if (d) ::closedir(d);
  return out;
}

}  // namespace

TEST_CASE("allow=: an allowed name answers over HTTP and HTTPS through CONNECT, another gets 403 saying why, nothing routes out",
          "[net][zygote]") {
  Upstream up;
  TestRoot root;
  auto id = root.create({"--net", "allow=good.test:" + port(up.http) + ",good.test:" + port(up.https), "--net-allow-private",
                         "good.test"},
                        resolving());
  CHECK(curl(root, id, "http://good.test:" + port(up.http) + "/") ==
        "200 hello from upstream, Host: good.test:" + port(up.http) + "\n");
  CHECK(curl(root, id, "https://good.test:" + port(up.https) + "/") ==
        "200 hello from upstream, Host: good.test:" + port(up.https) + "\n");
  // Python's own clients read the same settings.
  auto py = root.cell(id, "import urllib.request\nprint(urllib.request.urlopen('http://good.test:" + port(up.http) +
                              "/', timeout=20).read().decode(), end='')");
  CHECK(py["stdout"] == "hello from upstream, Host: good.test:" + port(up.http) + "\n");

  std::string denied = curl(root, id, "http://other.test:" + port(up.http) + "/");
  CHECK(denied.starts_with("403 nsbox: other.test:" + port(up.http) + " is not in this sandbox's allowlist"));
  // No route but loopback: the proxy is the only way out, and the host's loopback is not the sandbox's.
  CHECK(root.sh(id, "tail -n +2 /proc/net/route | wc -l").out == "0\n");
  CHECK(root.sh(id, "ls /proc/sys/net/ipv4/conf | grep -v -e all -e default").out == "lo\n");
  CHECK(root.sh(id, "curl -sS -m 5 --noproxy '*' http://127.0.0.1:" + port(up.http) + "/ >/dev/null 2>&1; echo $?").out == "7\n");
  // The refusal is in inspect, with its reason.
  auto info = TestRoot::json(root.nsbox({"inspect", "--json", id}));
  REQUIRE(info["net_denials"].size() >= 1);
  CHECK(info["net_denials"].back()["host"] == "other.test");
  CHECK(info["net"]["allow"].size() == 2);
  CHECK(root.nsbox({"inspect", id}).out.find("is not in this sandbox's allowlist") != std::string::npos);
}

TEST_CASE("allow=: a name that resolves to a loopback address is refused unless --net-allow-private names it", "[net]") {
  Upstream up;
  TestRoot root;
  auto id = root.create({"--net", "allow=priv.test:" + port(up.http) + ",good.test:" + port(up.http), "--net-allow-private",
                         "good.test"},
                        resolving());
  std::string refused = curl(root, id, "http://priv.test:" + port(up.http) + "/");
  CHECK(refused.starts_with("403 nsbox: priv.test resolves to 127.0.0.1, a loopback address"));
  CHECK(refused.find("--net-allow-private priv.test") != std::string::npos);
  CHECK(curl(root, id, "http://good.test:" + port(up.http) + "/").starts_with("200 "));
  // An address literal is checked the same way (NO_PROXY names 127.0.0.1: it is the
  // sandbox's own loopback, so the request must ask for the proxy).
  auto literal = root.create({"--net", "allow=127.0.0.1:" + port(up.http)}, resolving());
  CHECK(curl(root, literal, "http://127.0.0.1:" + port(up.http) + "/", "--noproxy ''").starts_with("403 nsbox: 127.0.0.1 resolves to 127.0.0.1, a loopback"));
}

// The proxy's own lookup (getaddrinfo, the host's /etc/resolv.conf): no name is mapped
// here. The proxy runs in the test's network namespace, whose DNS server answers
// public.example with the public test host and private.example with the private one: a
// name whose answer is private is refused after the lookup (DNS rebinding).
TEST_CASE("allow=: names are resolved through DNS: a public answer is reached, a private answer is refused after the lookup",
          "[net]") {
  NSBOX_NEEDS(root());  // the test's network namespace (unshare -n)
  TestNetwork world(std::map<std::string, std::string>{{"private.example", TestNetwork::kPrivateHost}});
  TestRoot root;
  std::string p = port(world.port);
  auto id = root.create({"--net", "allow=public.example:" + p + ",private.example:" + p}, {.extra_env = {world.hook()}});
  CHECK(curl(root, id, "http://public.example:" + p + "/copyright").starts_with("200 "));
  std::string refused = curl(root, id, "http://private.example:" + p + "/");
  CHECK(refused.starts_with("403 nsbox: private.example resolves to 10.9.9.9, a private"));
  auto info = TestRoot::json(root.nsbox({"inspect", "--json", id}));
  REQUIRE(info["net_denials"].size() >= 1);
  CHECK(info["net_denials"].back()["host"] == "private.example");
}

TEST_CASE("allow=: a TLS ClientHello naming another server than the CONNECT host is refused", "[net]") {
  Upstream up;
  TestRoot root;
  auto id = root.create({"--net", "allow=good.test:" + port(up.https), "--net-allow-private", "good.test"}, resolving());
  const std::string script = R"PY(import socket, ssl, sys
def hello(server_name):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    s.sendall(b"CONNECT good.test:%s HTTP/1.1\r\nHost: good.test\r\n\r\n" % sys.argv[1].encode())
    head = s.recv(4096)
    assert head.startswith(b"HTTP/1.1 200"), head
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with context.wrap_socket(s, server_hostname=server_name) as t:
            t.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return t.recv(4096).split(b"\r\n")[0].decode()
    except (OSError, ssl.SSLError):
        return "refused"
print(hello("good.test"), "|", hello("evil.test"))
)PY";
  auto r = root.sh(id, "cat > /tmp/hello.py && python3 /tmp/hello.py " + port(up.https), {}, {.stdin_data = script});
  CHECK(r.out == "HTTP/1.1 200 OK | refused\n");
  auto info = TestRoot::json(root.nsbox({"inspect", "--json", id}));
  REQUIRE(!info["net_denials"].empty());
  CHECK(info["net_denials"].back()["reason"].get<std::string>().find("'evil.test' is not the CONNECT host good.test") !=
        std::string::npos);
}

TEST_CASE("the allowlist changes live, without a restart, and only a sandbox made with allow= has one", "[net][zygote]") {
  Upstream up;
  TestRoot root;
  auto id = root.create({"--net", "allow=other.test:1"}, resolving());
  root.cell(id, "x = 41");
  CHECK(curl(root, id, "http://good.test:" + port(up.http) + "/").starts_with("403 "));
  auto changed = root.nsbox({"net", id, "--allow", "good.test:" + port(up.http), "--allow-private", "good.test"});
  REQUIRE(changed.exit_code == 0);
  CHECK(changed.out == id + ": allow: good.test:" + port(up.http) + " (private allowed: good.test)\n");
  CHECK(curl(root, id, "http://good.test:" + port(up.http) + "/").starts_with("200 "));
  CHECK(root.cell(id, "print(x + 1)")["stdout"] == "42\n");  // the kernel's state stayed
  CHECK(TestRoot::json(root.nsbox({"inspect", "--json", id}))["net"]["allow"] == json::array({"good.test:" + port(up.http)}));
  // Nothing allowed at all.
  REQUIRE(root.nsbox({"net", id, "--allow", ""}).exit_code == 0);
  CHECK(curl(root, id, "http://good.test:" + port(up.http) + "/").starts_with("403 "));

  auto none = root.create();
  auto refused = root.nsbox({"net", none, "--allow", "good.test"});
  CHECK(refused.exit_code != 0);
  CHECK(refused.err.find("only a sandbox made with --net allow=") != std::string::npos);
  auto bad = root.nsbox({"create", "--net", "allow=*.com"});
  CHECK(bad.exit_code != 0);
  CHECK(bad.err.find("two labels") != std::string::npos);
}

TEST_CASE("the egress proxy is a child of the supervisor that goes with the sandbox", "[net]") {
  TestRoot root;
  auto id = root.create({"--net", "allow=good.test"});
  auto info = TestRoot::json(root.nsbox({"inspect", "--json", id}));
  pid_t supervisor = info["supervisor_pid"].get<pid_t>();
  auto proxies = children_named(supervisor, "nsbox-netproxy");
  REQUIRE(proxies.size() == 1);
  REQUIRE(root.nsbox({"rm", id}).exit_code == 0);
  CHECK(::kill(proxies[0], 0) != 0);
}

TEST_CASE("a flood of connections gets 503 past the proxy's bound, an endless head gets 400, and the sandbox goes on", "[net]") {
  Upstream up;
  TestRoot root;
  auto id = root.create({"--net", "allow=good.test:" + port(up.http), "--net-allow-private", "good.test"}, resolving());
  const std::string script = R"PY(import socket
held = [socket.create_connection(("127.0.0.1", 3128), timeout=20) for _ in range(300)]
refused = 0
for s in held[256:]:
    s.settimeout(10)
    try:
        refused += s.recv(64).startswith(b"HTTP/1.1 503")
    except OSError:
        pass
for s in held:
    s.close()
big = socket.create_connection(("127.0.0.1", 3128), timeout=20)
big.sendall(b"GET http://good.test/ HTTP/1.1\r\nX: " + b"a" * 70000)
print(refused, big.recv(64).split(b"\r\n")[0].decode())
)PY";
  auto r = root.sh(id, "cat > /tmp/flood.py && python3 /tmp/flood.py", {}, {.stdin_data = script});
  CHECK(r.out == "44 HTTP/1.1 400 Bad Request\n");
  // The held connections are gone once closed: the proxy serves again.
  bool served = false;
  for (int i = 0; i < 50 && !served; ++i) {
    served = curl(root, id, "http://good.test:" + port(up.http) + "/").starts_with("200 ");
    if (!served) ::usleep(200 * 1000);
  }
  CHECK(served);
  CHECK(TestRoot::json(root.nsbox({"inspect", "--json", id}))["status"] == "running");
}
