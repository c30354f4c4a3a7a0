// An HTTP request's head as nsbox serve reads it: Boost.Beast's parser (as the server
// configures it: 16 KiB of header), then what nsbox adds — the target split into a
// percent-decoded path and query (api/request_target), the path's segments, the route it
// finds in the API's table (api/routes), the bearer token's check and a download link's
// signature check (api/access).
//
// Checks: a segment is never empty and never holds '/'; a route found has the path's
// segments (its literals equal them, its parameters are them, in order); the token is
// accepted only for "Bearer <token>" (the scheme in any case); a link verifies only with
// the signature the server would make, and only before its expiry.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "api/access.h"
#include "api/api_service.h"
#include "api/request_target.h"
#include "tests/fuzz/fuzz_check.h"

namespace http = boost::beast::http;

namespace {

std::string_view sv(boost::beast::string_view s) { return {s.data(), s.size()}; }

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

void check_access(const nsbox::api::HttpRequest& r, const std::vector<std::string>& segments) {
  const std::string token = "tok3n-of-the-fuzzer";
  nsbox::api::BearerToken bearer(token);
  bool expected = r.authorization.size() == 7 + token.size() &&
                  equals_ignoring_case(std::string_view(r.authorization).substr(0, 7), "Bearer ") &&
                  r.authorization.substr(7) == token;
  FUZZ_CHECK(bearer.accepts(r.authorization) == expected);

  nsbox::api::LinkSigner signer(std::string(32, 'k'));
  std::string sandbox = segments.size() > 2 ? segments[2] : "";
  std::string path = r.query_value("path");
  int64_t expires = std::strtoll(r.query_value("expires").c_str(), nullptr, 10);
  std::string signature = r.query_value("signature");
  bool genuine = signature == signer.sign(sandbox, path, expires);
  FUZZ_CHECK(signer.verify(sandbox, path, expires, signature, 1000) == (genuine && 1000 < expires));
  // The server's own link verifies until it expires, and not after.
  std::string own = signer.sign(sandbox, path, 2000);
  FUZZ_CHECK(signer.verify(sandbox, path, 2000, own, 1999) && !signer.verify(sandbox, path, 2000, own, 2000));
}

void check_route(const nsbox::api::HttpRequest& r, const std::vector<std::string>& segments) {
  auto m = nsbox::api::ApiService::routes().match(r.method, r.path);
  if (!m.route) return;
  FUZZ_CHECK(m.route->method == r.method);
  std::vector<std::string> pattern = nsbox::api::split_path(m.route->pattern);
  FUZZ_CHECK(pattern.size() == segments.size());
  size_t param = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i].front() == '{') FUZZ_CHECK(param < m.params.size() && m.params[param++] == segments[i]);
    else FUZZ_CHECK(pattern[i] == segments[i]);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  http::request_parser<http::empty_body> parser;
  parser.header_limit(16 * 1024);
  parser.eager(false);
  boost::beast::error_code ec;
  parser.put(boost::asio::buffer(data, size), ec);
  if (ec || !parser.is_header_done()) {
    // The target alone, as bytes: the decoder meets what a parser would have refused too.
    nsbox::api::HttpRequest raw;
    (void)nsbox::api::parse_target(std::string_view(reinterpret_cast<const char*>(data), size), raw);
    return 0;
  }
  const auto& h = parser.get();
  nsbox::api::HttpRequest r;
  r.method = std::string(sv(h.method_string()));
  if (!nsbox::api::parse_target(sv(h.target()), r)) return 0;
  if (auto it = h.find(http::field::authorization); it != h.end()) r.authorization = std::string(sv(it->value()));
  auto segments = nsbox::api::split_path(r.path);
  for (const auto& s : segments) FUZZ_CHECK(!s.empty() && s.find('/') == std::string::npos);
  check_route(r, segments);
  check_access(r, segments);
  return 0;
}
