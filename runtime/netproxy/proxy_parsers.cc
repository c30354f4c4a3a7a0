#include "runtime/netproxy/proxy_parsers.h"

#include "runtime/core/net_policy.h"
#include "isolation/sys/http_text.h"

#include <charconv>
#include <strings.h>

namespace nsbox::net {
namespace {

// Big-endian integers from `in` at `at`, with bounds.
struct Reader {
  std::string_view in;
  size_t at = 0;
  bool ok = true;
  uint32_t take(size_t n) {
    if (!ok || in.size() - at < n) {
      ok = false;
      return 0;
    }
    uint32_t v = 0;
    for (size_t i = 0; i < n; ++i) v = v << 8 | static_cast<unsigned char>(in[at + i]);
    at += n;
    return v;
  }
  std::string_view bytes(size_t n) {
    if (!ok || in.size() - at < n) {
      ok = false;
      return {};
    }
    std::string_view v = in.substr(at, n);
    at += n;
    return v;
  }
};

}  // namespace

std::optional<RequestHead> parse_request_head(std::string_view head, std::string& error) {
  size_t line_end = head.find("\r\n");
  if (line_end == std::string_view::npos) {
    error = "no request line";
    return std::nullopt;
  }
  std::string_view line = head.substr(0, line_end);
  size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
  if (sp1 == std::string_view::npos || sp2 == sp1) {
    error = "a malformed request line";
    return std::nullopt;
  }
  RequestHead r;
  r.method = std::string(line.substr(0, sp1));
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1), version = line.substr(sp2 + 1);
  if (!version.starts_with("HTTP/1.")) {
    error = "not HTTP/1.x";
    return std::nullopt;
  }
  if (r.method == "CONNECT") {
    r.connect = true;
    if (!split_authority(target, 0, r.host, r.port)) {
      error = "CONNECT needs host:port";
      return std::nullopt;
    }
    return r;
  }
  constexpr std::string_view kHttp = "http://";
  if (target.size() < kHttp.size() || !sys::iequals(target.substr(0, kHttp.size()), kHttp)) {
    error = target.starts_with("https://") || target.starts_with("HTTPS://")
                ? "https:// URLs go through CONNECT (use the proxy as an HTTPS proxy)"
                : "a request to the proxy must name an absolute http:// URL";
    return std::nullopt;
  }
  std::string_view rest = target.substr(kHttp.size());
  size_t path_at = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, path_at);
  if (authority.find('@') != std::string_view::npos) {
    error = "credentials in a URL are not passed on";
    return std::nullopt;
  }
  if (!split_authority(authority, 80, r.host, r.port)) {
    error = "a bad host in the URL";
    return std::nullopt;
  }
  std::string path = path_at == std::string_view::npos ? "/" : std::string(rest.substr(path_at));
  if (path.front() == '?') path.insert(0, "/");
  r.upstream_head = r.method + " " + path + " " + std::string(version) + "\r\n";
  // The headers, less the proxy's own. A Host that names another host than the URL is
  // refused: the allowlist checked the URL's, and the upstream would serve the Host's
  // (domain fronting: `GET http://allowed.test/` with `Host: metadata.google.internal`).
  bool has_host = false;
  std::string_view headers = head.substr(line_end + 2);
  while (!headers.empty()) {
    size_t end = headers.find("\r\n");
    if (end == std::string_view::npos) break;
    std::string_view h = headers.substr(0, end + 2);
    headers.remove_prefix(end + 2);
    if (h == "\r\n") break;  // the end of the head: nothing after it is a header
    size_t colon = h.find(':');
    std::string_view name = colon == std::string_view::npos ? std::string_view() : h.substr(0, colon);
    if (sys::iequals(name, "Proxy-Connection") || sys::iequals(name, "Proxy-Authorization")) continue;
    if (sys::iequals(name, "Host")) {
      std::string_view value = h.substr(colon + 1, h.size() - colon - 3);
      while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
      while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
      std::string host;
      uint16_t port = 0;
      if (has_host || !split_authority(value, 80, host, port) || normalize_host(host) != normalize_host(r.host) || port != r.port) {
        error = has_host ? "more than one Host header" : "the Host header names another host than the URL";
        return std::nullopt;
      }
      has_host = true;
    }
    r.upstream_head += h;
  }
  if (!r.upstream_head.ends_with("\r\n\r\n")) r.upstream_head += "\r\n";
  return r;
}

HelloStatus parse_client_hello(std::string_view bytes, std::string& server_name) {
  // The handshake message may span records: gather their payloads first.
  std::string handshake;
  Reader records{bytes};
  while (records.at < bytes.size()) {
    size_t start = records.at;
    uint32_t type = records.take(1);
    if (records.ok && type != 0x16) return handshake.empty() && start == 0 ? HelloStatus::kNotTls : HelloStatus::kMalformed;
    uint32_t major = records.take(1);
    records.take(1);
    uint32_t length = records.take(2);
    if (!records.ok) return HelloStatus::kNeedMore;
    if (major != 3 || length == 0 || length > 16384 + 2048) return start == 0 ? HelloStatus::kNotTls : HelloStatus::kMalformed;
    std::string_view payload = records.bytes(length);
    if (!records.ok) return bytes.size() > kMaxClientHello ? HelloStatus::kMalformed : HelloStatus::kNeedMore;
    handshake.append(payload);
    if (handshake.size() >= 4) {
      size_t needed = 4 + (static_cast<size_t>(static_cast<unsigned char>(handshake[1])) << 16 |
                           static_cast<size_t>(static_cast<unsigned char>(handshake[2])) << 8 |
                           static_cast<unsigned char>(handshake[3]));
      if (handshake.size() >= needed) break;
      if (needed > kMaxClientHello) return HelloStatus::kMalformed;
    }
  }
  if (handshake.size() < 4) return HelloStatus::kNeedMore;
  Reader r{handshake};
  if (r.take(1) != 0x01) return HelloStatus::kMalformed;  // not a ClientHello
  size_t length = r.take(3);
  if (handshake.size() < 4 + length) return HelloStatus::kNeedMore;
  r.in = r.in.substr(0, 4 + length);
  r.take(2);                  // client_version
  r.bytes(32);                // random
  r.bytes(r.take(1));         // session_id
  r.bytes(r.take(2));         // cipher_suites
  r.bytes(r.take(1));         // compression_methods
  if (!r.ok) return HelloStatus::kMalformed;
  server_name.clear();
  if (r.at == r.in.size()) return HelloStatus::kDone;  // no extensions
  Reader ext{r.bytes(r.take(2))};
  if (!r.ok) return HelloStatus::kMalformed;
  while (ext.ok && ext.at < ext.in.size()) {
    uint32_t type = ext.take(2);
    std::string_view data = ext.bytes(ext.take(2));
    if (!ext.ok) return HelloStatus::kMalformed;
    if (type != 0) continue;  // server_name
    Reader list{data};
    Reader names{list.bytes(list.take(2))};
    while (list.ok && names.ok && names.at < names.in.size()) {
      uint32_t name_type = names.take(1);
      std::string_view name = names.bytes(names.take(2));
      if (names.ok && name_type == 0) {
        server_name = std::string(name);
        return HelloStatus::kDone;
      }
    }
    return HelloStatus::kMalformed;
  }
  return ext.ok ? HelloStatus::kDone : HelloStatus::kMalformed;
}

}  // namespace nsbox::net
