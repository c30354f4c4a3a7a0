// nsbox's one HTTP client (mounts/http/client.h) against scripted servers on 127.0.0.1: what
// its users rely on beyond the bucket clients' tests (bucket_lifecycle_test.cc): an answer
// relayed as it comes, bounded bodies, bodies from a reader, the proxy option.
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string>

#include "mounts/http/client.h"
#include "tests/support/loopback_http.h"

using nsbox::test::LoopbackHttpServer;
using nsbox::test::RefusingPort;

namespace {

// Sets an environment variable for the test's life.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = ::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { old_ ? (void)::setenv(name_, old_->c_str(), 1) : (void)::unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace

TEST_CASE("the HTTP client passes an answer on as it comes, with its head as the server wrote it", "[http client]") {
  LoopbackHttpServer server("HTTP/1.1 404 Not Found\r\nX-Mixed-Case: Kept\r\nContent-Length: 5\r\nConnection: close\r\n\r\nnope!");
  nsbox::http::Client client;
  nsbox::http::Request request;
  request.url = server.url("/x");
  std::string passed;
  long status_seen = 0;
  std::optional<uint64_t> length_seen;
  request.on_body = [&](const nsbox::http::Response& head, std::string_view bytes) {
    status_seen = head.status;
    length_seen = head.content_length;
    passed += bytes;
    return true;
  };
  auto response = client.perform(request);
  REQUIRE(response);
  CHECK(status_seen == 404);  // whatever the status: the caller relays it
  CHECK(length_seen == 5u);
  CHECK(passed == "nope!");
  CHECK(response->body.empty());  // it went to on_body, not into memory
  CHECK(response->header("x-mixed-case") == "Kept");
  bool as_sent = false;
  for (const auto& [name, value] : response->headers) as_sent = as_sent || name == "X-Mixed-Case";
  CHECK(as_sent);
}

TEST_CASE("an answer's receiver that says stop ends the transfer with an error", "[http client]") {
  LoopbackHttpServer server(nsbox::test::http_ok("a body the receiver will not take"));
  nsbox::http::Client client;
  nsbox::http::Request request;
  request.url = server.url("/x");
  request.on_body = [](const nsbox::http::Response&, std::string_view) { return false; };
  auto response = client.perform(request);
  REQUIRE_FALSE(response);
  CHECK(response.error().sys_errno == ECANCELED);
  CHECK(response.error().message == "GET " + server.url("/x") + ": cut short, its receiver stopped it");
}

TEST_CASE("a body larger than the request's bound is an error that names the request without its query", "[http client]") {
  LoopbackHttpServer server(nsbox::test::http_ok(std::string(100, 'x')));
  nsbox::http::Client client;
  nsbox::http::Request request;
  request.url = server.url("/x?sig=secret");
  request.max_body = 64;
  auto response = client.perform(request);
  REQUIRE_FALSE(response);
  CHECK(response.error().code == nsbox::ErrorCode::kRemote);
  CHECK(response.error().message == "GET " + server.url("/x") + ": a reply larger than 64 bytes");

  request.what = "the store";  // a caller's own name for the request
  response = client.perform(request);
  REQUIRE_FALSE(response);
  CHECK(response.error().message == "the store: a reply larger than 64 bytes");
}

TEST_CASE("a body from a reader is sent chunked when its length is unknown, and the reader's error ends the request as it is",
          "[http client]") {
  LoopbackHttpServer server(nsbox::test::http_ok("ok"));
  nsbox::http::Client client;
  nsbox::http::Request request;
  request.method = "PUT";
  request.url = server.url("/upload");
  int calls = 0;
  request.body_reader = [&](char* to, size_t room) -> nsbox::Result<size_t> {
    if (calls++ > 0 || room < 5) return size_t{0};
    std::memcpy(to, "hello", 5);
    return size_t{5};
  };
  auto response = client.perform(request);
  REQUIRE(response);
  CHECK(response->status == 200);
  REQUIRE(server.requests().size() == 1);
  CHECK(server.requests()[0].starts_with("PUT /upload HTTP/1.1\r\n"));
  CHECK(server.requests()[0].find("Transfer-Encoding: chunked") != std::string::npos);

  // A server that says nothing: an early answer cannot end the upload before the reader is asked.
  LoopbackHttpServer silent("", true);
  request.url = silent.url("/upload");
  request.body_reader = [](char*, size_t) -> nsbox::Result<size_t> {
    return nsbox::fail(nsbox::make_error(nsbox::ErrorCode::kLimitExceeded, "the upload is over its limit"));
  };
  response = client.perform(request);
  REQUIRE_FALSE(response);
  CHECK(response.error().code == nsbox::ErrorCode::kLimitExceeded);
  CHECK(response.error().message == "the upload is over its limit");
}

TEST_CASE("a client told to use no proxy connects to the server even where the environment names one", "[http client]") {
  LoopbackHttpServer server(nsbox::test::http_ok("direct"));
  RefusingPort proxy;
  ScopedEnv http_proxy("http_proxy", "http://127.0.0.1:" + std::to_string(proxy.port()));
  ScopedEnv no_proxy("no_proxy", "");

  nsbox::http::Request request;
  request.url = server.url("/x");
  nsbox::http::Client through_environment;
  auto refused = through_environment.perform(request);
  REQUIRE_FALSE(refused);  // the proxy's port refuses
  CHECK(server.connections() == 0);

  nsbox::http::Client direct({.proxy_from_environment = false, .detailed_errors = true});
  auto response = direct.perform(request);
  REQUIRE(response);
  CHECK(response->body == "direct");
}

TEST_CASE("a failed connection's error says curl's sentence when the client asks for detail", "[http client]") {
  RefusingPort port;
  nsbox::http::Request request;
  request.url = "http://127.0.0.1:" + std::to_string(port.port()) + "/x";
  nsbox::http::Client plain;
  auto words = plain.perform(request);
  REQUIRE_FALSE(words);
  CHECK(words.error().message == "GET " + request.url + ": Couldn't connect to server");
  nsbox::http::Client detailed({.detailed_errors = true});
  auto sentence = detailed.perform(request);
  REQUIRE_FALSE(sentence);
  CHECK_THAT(sentence.error().message, Catch::StartsWith("GET " + request.url + ": Failed to connect to 127.0.0.1 port " +
                                                         std::to_string(port.port())));
}
