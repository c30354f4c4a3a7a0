// Which requests are a sandbox's port's (api/port_proxy.h), and the head its server gets:
// the server's credentials never reach it.
#include <catch2/catch.hpp>

#include "api/port_proxy.h"
#include "isolation/sys/http_text.h"
#include "runtime/core/port_number.h"

using nsbox::api::HttpRequest;

namespace {

HttpRequest request(std::string target, std::string host = "127.0.0.1:8080",
                    std::vector<std::pair<std::string, std::string>> headers = {}) {
  HttpRequest r;
  r.method = "GET";
  r.target = std::move(target);
  r.host = std::move(host);
  r.headers = std::move(headers);
  r.headers.insert(r.headers.begin(), {"Host", r.host});
  return r;
}

}  // namespace

TEST_CASE("port tunnels: a path under /ports/{P}/, or a Host under the ports' domain") {
  auto t = nsbox::api::tunnel_target(request("/v1/sandboxes/sbx-a1/ports/8000/app/x?q=1"), "");
  REQUIRE(t);
  CHECK(t->sandbox == "sbx-a1");
  CHECK(t->port == 8000);
  CHECK(t->target == "/app/x?q=1");
  CHECK(t->prefix == "/v1/sandboxes/sbx-a1/ports/8000");
  CHECK(nsbox::api::tunnel_target(request("/v1/sandboxes/web/ports/3000/"), "")->target == "/");
  // The forward's own routes, and what is not a port, are not tunnels.
  for (const char* not_one : {"/v1/sandboxes/sbx-a1/ports/8000", "/v1/sandboxes/sbx-a1/ports", "/v1/sandboxes/sbx-a1/ports/",
                              "/v1/sandboxes/sbx-a1/ports/0/", "/v1/sandboxes/sbx-a1/ports/65536/", "/v1/sandboxes/sbx-a1/ports/80x/",
                              "/v1/sandboxes/sbx-a1/ports/8000?x=/", "/v1/sandboxes//ports/8000/", "/v1/info"})
    CHECK_FALSE(nsbox::api::tunnel_target(request(not_one), ""));

  auto h = nsbox::api::tunnel_target(request("/v1/info", "8000-sbx-a1.sbx.example:443"), "sbx.example");
  REQUIRE(h);
  CHECK(h->sandbox == "sbx-a1");
  CHECK(h->port == 8000);
  CHECK(h->target == "/v1/info");  // the whole path is the app's
  CHECK(h->prefix.empty());
  CHECK(nsbox::api::tunnel_target(request("/", "8000-SBX-A1.SBX.EXAMPLE"), "sbx.example"));
  for (const char* host : {"8000-sbx-a1.other.example", "sbx.example", "x-sbx-a1.sbx.example", "8000-.sbx.example", "8000sbx.sbx.example"})
    CHECK_FALSE(nsbox::api::tunnel_target(request("/", host), "sbx.example"));
  CHECK_FALSE(nsbox::api::tunnel_target(request("/", "8000-sbx-a1.sbx.example"), ""));  // no domain: no Host routing

  CHECK(nsbox::api::url_domain("http://sbx.localhost:8080/x") == "sbx.localhost");
  CHECK(nsbox::api::url_domain("https://nsbox.example.com") == "nsbox.example.com");
  for (const char* none : {"http://127.0.0.1:8080", "http://[::1]:80", "no-scheme", "http://", "http://a_b.example"})
    CHECK(nsbox::api::url_domain(none).empty());
}

TEST_CASE("port tunnels: the sandbox's server gets the head without the server's token, rewritten for the path form") {
  auto r = request("/v1/sandboxes/sbx-a1/ports/8000/echo", "api.example:8080",
                   {{"Authorization", "Bearer sekrit"}, {"Cookie", "api=1"}, {"Connection", "keep-alive"},
                    {"X-Nsbox-Forwarded-By", "shard-b"}, {"Accept", "text/html"}, {"Bad", "a\r\nInjected: 1"}});
  auto t = nsbox::api::tunnel_target(r, "");
  REQUIRE(t);
  std::string head = nsbox::api::upstream_head(r, *t);
  CHECK(head.starts_with("GET /echo HTTP/1.1\r\n"));
  CHECK(head.ends_with("\r\n\r\n"));
  for (const char* gone : {"sekrit", "Cookie", "keep-alive", "shard-b", "api.example:8080\r\nHost", "Injected"})
    CHECK(head.find(gone) == std::string::npos);
  CHECK(head.find("Accept: text/html\r\n") != std::string::npos);
  CHECK(head.find("Host: 127.0.0.1:8000\r\n") != std::string::npos);
  CHECK(head.find("X-Forwarded-Prefix: /v1/sandboxes/sbx-a1/ports/8000\r\n") != std::string::npos);
  CHECK(head.find("Connection: close\r\n") != std::string::npos);

  auto ws = request("/chat", "8000-sbx-a1.sbx.example",
                    {{"Upgrade", "websocket"}, {"Connection", "Upgrade"}, {"Cookie", "app=1"}, {"Authorization", "Bearer sekrit"}});
  auto wt = nsbox::api::tunnel_target(ws, "sbx.example");
  REQUIRE(wt);
  std::string upgrade = nsbox::api::upstream_head(ws, *wt);
  CHECK(upgrade.find("Connection: Upgrade\r\n") != std::string::npos);
  CHECK(upgrade.find("Connection: close") == std::string::npos);
  CHECK(upgrade.find("Cookie: app=1\r\n") != std::string::npos);  // a Host-routed app's own
  CHECK(upgrade.find("Host: 8000-sbx-a1.sbx.example\r\n") != std::string::npos);
  CHECK(upgrade.find("sekrit") == std::string::npos);
}

TEST_CASE("a port is decimal digits from the least allowed to 65535, as text and in a request", "[ports]") {
  CHECK(nsbox::parse_port("8080") == 8080);
  CHECK(nsbox::parse_port("0", 0) == 0);
  for (const char* bad : {"", "0", "65536", "-1", "+80", " 80", "80 ", "8o", "123456", "0x50"}) {
    INFO(bad);
    CHECK_FALSE(nsbox::parse_port(bad));
  }
  using Json = nsbox::protocol::Json;
  CHECK(*nsbox::port_field(Json{{"port", 22}}, "port", 1) == 22);
  CHECK(*nsbox::port_field(Json::object(), "host_port", 0, 0) == 0);
  for (const Json& bad : {Json::object(), Json{{"port", 0}}, Json{{"port", 70000}}, Json{{"port", "80"}}, Json{{"port", 8.5}}}) {
    INFO(bad.dump());
    auto r = nsbox::port_field(bad, "port", 1);
    REQUIRE_FALSE(r);
    CHECK(r.error().message == "\"port\" must be a port number from 1 to 65535");
  }
}

TEST_CASE("header text: names compare without case, and any control character but a tab is refused", "[ports]") {
  CHECK(nsbox::sys::iequals("Content-Length", "content-LENGTH"));
  CHECK_FALSE(nsbox::sys::iequals("Host", "Hosts"));
  CHECK_FALSE(nsbox::sys::iequals("K\xc3\xa9y", "K\xc3\x89y"));  // ASCII only
  CHECK_FALSE(nsbox::sys::has_control("a\tb"));
  using namespace std::string_view_literals;
  for (std::string_view bad : {"a\r\nX-Injected: 1"sv, "a\nb"sv, "a\x7f"sv, "a\0b"sv}) CHECK(nsbox::sys::has_control(bad));
}
