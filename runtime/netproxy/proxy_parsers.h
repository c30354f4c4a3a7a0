// The bytes a sandbox sends its egress proxy, parsed (docs/network.md): an HTTP request
// head and a TLS ClientHello's server name. Every byte is hostile: bounded, and a parse
// either succeeds or says what was wrong; nothing here allocates beyond its input.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nsbox::net {

inline constexpr size_t kMaxRequestHead = 64 * 1024;
inline constexpr size_t kMaxClientHello = 64 * 1024;

struct RequestHead {
  bool connect = false;  // CONNECT host:port (else a plain HTTP request in absolute form)
  std::string method;
  std::string host;  // as given (normalize_host before matching)
  uint16_t port = 0;
  // For a plain request: the head to send upstream (origin-form request line, the
  // proxy's own headers dropped).
  std::string upstream_head;
};

// `head` ends with "\r\n\r\n" (what follows its first blank line is not read). nullopt
// with `error` set when it is not a request the proxy serves.
std::optional<RequestHead> parse_request_head(std::string_view head, std::string& error);

enum class HelloStatus { kNeedMore, kDone, kNotTls, kMalformed };

// Looks at the first bytes a client sends after CONNECT: TLS handshake records holding a
// ClientHello. kDone: `server_name` is the SNI ("" when the hello has none).
HelloStatus parse_client_hello(std::string_view bytes, std::string& server_name);

}  // namespace nsbox::net
