// One HTTP request as the API's handlers see it, and the way they answer it.
//
// Handlers run on worker threads (a cell may take 180 s); the HTTP side lives on one I/O
// thread (api/http_server.cc, the only code that sees Boost.Beast). An Exchange is the
// bridge: a handler reads the request, perhaps its streamed body, and answers once —
// with a JSON document, a file, or a stream of NDJSON lines.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string_view>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox::api {

using Json = nlohmann::json;

struct HttpRequest {
  std::string method;                        // "GET", "POST", ...
  std::string target;                        // as sent: the path and query, encoded
  std::string path;                          // percent-decoded, without the query
  std::map<std::string, std::string> query;  // percent-decoded
  std::string authorization;                 // the header, as sent
  std::string accept;
  std::string forwarded_by;  // X-Nsbox-Forwarded-By: the shard of the server that relayed it here
  std::string host;          // the Host header
  // Every header as sent, in order (within the 16 KiB head): what a port's tunnel passes on.
  std::vector<std::pair<std::string, std::string>> headers;
  std::optional<uint64_t> content_length;
  std::string body;  // a JSON body, read whole (bounded); empty for a streamed upload

  bool wants_stream() const { return accept.find("application/x-ndjson") != std::string::npos; }
  std::string query_value(const std::string& key, const std::string& fallback = "") const {
    auto it = query.find(key);
    return it == query.end() ? fallback : it->second;
  }
};

class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual const HttpRequest& request() const = 0;

  // A streamed request body (PUT of a file): a pipe the HTTP side fills, EOF at its end.
  // body_complete() says, once EOF was read, whether the whole body came.
  virtual int body_fd() = 0;
  virtual Result<void> body_complete() = 0;

  // Exactly one answer per request.
  virtual void respond(int status, const Json& document, std::vector<std::pair<std::string, std::string>> headers = {}) = 0;
  virtual void respond_file(UniqueFd file, uint64_t size) = 0;  // 200 application/octet-stream
  virtual void respond_text(int status, std::string body, std::string content_type) = 0;  // not JSON (metrics)
  // A 200 NDJSON stream: the first line sends the header. Blocks while the client is more
  // than 1 MiB behind; false once the client has gone (the handler may stop producing).
  virtual bool stream_line(const Json& event) = 0;
  virtual void end_stream() = 0;

  // Relaying another server's answer (a sandbox of another shard, api/peer_client.h):
  // its status and headers (a length, or chunked), then its body's bytes as they come,
  // with the stream's backpressure (false once the client has gone), then the end;
  // `complete` false closes the connection (the peer's answer broke off).
  virtual void relay_head(int status, std::vector<std::pair<std::string, std::string>> headers,
                          std::optional<uint64_t> length) = 0;
  virtual bool relay_bytes(std::string_view bytes) = 0;
  virtual void relay_end(bool complete) = 0;

  // A tunnel (a sandbox's port, api/port_proxy.cc): the answer is whatever `upstream`
  // sends, passed to the client as it comes, and the client's further bytes go to it, until
  // both have ended; then the connection closes. `upstream` has had the request's head;
  // `port` is the sandbox's (a port that closes without answering is a 502 naming it).
  // `hold` is kept until the tunnel ends (what counts tunnels).
  virtual void tunnel(UniqueFd upstream, uint16_t port, std::shared_ptr<void> hold) = 0;

  // For CallControl: readable when the server is stopping and this request must end;
  // gone_fd() also when the client has gone away.
  virtual int cancel_fd() const = 0;
  virtual int gone_fd() const = 0;
};

}  // namespace nsbox::api
