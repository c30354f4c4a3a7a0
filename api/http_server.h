// HTTP/1.1 for the API, on Boost.Beast (docs/design.md, "Server"; docs/http-library.md: the choice and its numbers).
// The only code that sees Beast or Asio (it costs a minute of compiling): one I/O thread
// serves every connection; each request is answered by ApiService on a thread of its
// own, through an Exchange; events, files and bodies cross between them bounded.
//
//   connection ──header──► limits, token, budget ──► worker: ApiService::handle(Exchange)
//        ▲                                              │ respond / respond_file / stream_line
//        └──── writes (timeouts, 1 MiB backlog) ◄────────┘
//
// Limits (docs/api.md, "Limits"): 16 KiB of header, 16 MiB of JSON body, the upload
// limit for PUT bodies (413 at once when Content-Length says so); 1,024 connections per
// listener (the unix socket and TCP apart), where a new one past the limit closes the one
// that has waited longest for a request head (503 only when none waits); a request head
// within 5 s of its first byte (of the accept, for a connection's first), 60 s idle
// keep-alive; 60 s without a byte of a body; 30 s for a write, or 64 KiB of a file, that
// the client does not take. Requests in work by kind (api/request_budgets.h): 16 probes,
// 64 without a token (16 per sandbox's links, 16 /metrics), 256 others; past them 503.
// SIGTERM or SIGINT: the listeners close, idle connections close, requests in flight get
// 10 s (a second signal: none), then their waits are cancelled; exit when the last one
// is done.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "api/api_service.h"
#include "isolation/sys/error.h"

namespace nsbox::api {

struct ListenOptions {
  std::string socket_path;  // "" for none
  std::string tcp_host;     // a numeric address or "localhost"; "" for none
  uint16_t tcp_port = 0;    // 0: any free port
  bool allow_remote = false;
};

class HttpServer {
 public:
  static Result<std::unique_ptr<HttpServer>> bind(ApiService& service, const ListenOptions& options);
  virtual ~HttpServer() = default;
  virtual uint16_t tcp_port() const = 0;  // the bound port; 0 without TCP
  // Serves until SIGTERM/SIGINT (or stop()); returns when every request has ended.
  virtual Result<void> run() = 0;
  // From any thread: stops as the first signal would (requests in flight get 10 s).
  virtual void stop() = 0;
};

// "127.0.0.1:0", "[::1]:8080", "localhost:0" -> host and port; loopback checked unless allowed.
Result<ListenOptions> parse_listen(const std::string& text, bool allow_remote);

}  // namespace nsbox::api
