#include "api/request_target.h"

namespace nsbox::api {

Result<std::string> percent_decode(std::string_view text, bool query) {
  std::string out;
  out.reserve(text.size());
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '%') {
      int hi = i + 2 < text.size() ? hex(text[i + 1]) : -1, lo = i + 2 < text.size() ? hex(text[i + 2]) : -1;
      if (hi < 0 || lo < 0) return fail(make_error(ErrorCode::kMalformedRequest, "a bad %-escape in the URL"));
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (c == '+' && query) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

Result<void> parse_target(std::string_view target, HttpRequest& r) {
  // Origin form only: a target is relayed to peers as the path of their URL.
  if (target.empty() || target[0] != '/')
    return fail(make_error(ErrorCode::kMalformedRequest, "the request target must be a path starting with '/'"));
  // No fragment, and no "." or ".." segment (plain or escaped): what routes a request
  // here is what a peer it is relayed to sees (curl would drop the one and fold the other).
  if (target.find('#') != std::string_view::npos)
    return fail(make_error(ErrorCode::kMalformedRequest, "a request target has no fragment ('#')"));
  auto q = target.find('?');
  r.path = NSBOX_TRY(percent_decode(target.substr(0, q), false));
  for (size_t at = 0; at <= r.path.size();) {
    size_t slash = r.path.find('/', at);
    std::string_view segment = std::string_view(r.path).substr(at, slash == std::string::npos ? std::string::npos : slash - at);
    if (segment == "." || segment == "..")
      return fail(make_error(ErrorCode::kMalformedRequest, "a request path has no '.' or '..' segment"));
    if (slash == std::string::npos) break;
    at = slash + 1;
  }
  if (q == std::string_view::npos) return {};
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    auto amp = rest.find('&');
    std::string_view kv = rest.substr(0, amp);
    auto eq = kv.find('=');
    std::string key = NSBOX_TRY(percent_decode(kv.substr(0, eq), true));
    r.query[key] = eq == std::string_view::npos ? "" : NSBOX_TRY(percent_decode(kv.substr(eq + 1), true));
    if (amp == std::string_view::npos) break;
    rest = rest.substr(amp + 1);
  }
  return {};
}

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start < path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    if (end > start) parts.push_back(path.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

}  // namespace nsbox::api
