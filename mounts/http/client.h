// The one HTTP client of nsbox (libcurl), for every host-side program that speaks HTTP
// out: the bucket servers and nsbox-snapstore to object stores, the tool bridge to tool
// and model services, nsbox-server to its peers. One place for what they share:
//
//   - a pool of easy handles, each kept with its live connections for the next request
//     (up to a bound; a handle whose transfer failed is closed, not kept);
//   - bounds in time (connect, a stall, the whole request) and a stop for every
//     transfer under way;
//   - HTTP(S) only, no redirect followed: nothing else is reached with a request that
//     may carry a signature or a key;
//   - proxies: the process's settings (http_proxy, https_proxy, no_proxy) or none;
//     TLS: libcurl's own CA store (nothing of the environment, AWS_CA_BUNDLE included);
//   - bodies: sent from memory, a file range or a reader; received into memory (bounded),
//     straight into the caller's buffer, or passed on as they come;
//   - errors that name the request ("PUT https://host/key") without its query, where a
//     SAS token or a signature travels.
//
// What differs between the users is an option of the client (ClientOptions) or of the
// request, set by each user: store_client_options (mounts/bucket/remote_reply.cc), the
// tool bridge's remotes (runtime/toolbridge), peer_options (api/peer_client.cc).
#pragma once

#include <atomic>
#include <cstdint>
#include <ctime>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "isolation/sys/error.h"

namespace nsbox::http {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct Limits {
  int connect_timeout_ms = 5000;
  // A request that moves no byte for this long fails (0: no such bound): a remote that
  // stops answering gives an error in bounded time instead of a hung reader.
  int stall_timeout_s = 10;
  int request_timeout_ms = 0;  // 0: none beyond the stall bound (large transfers take long)
};

struct ClientOptions {
  Limits limits;
  // The process's proxy settings apply (curl reads them from the environment), or none:
  // false for servers of our own.
  bool proxy_from_environment = true;
  // HTTP/1.1 even where curl would offer HTTP/2 (https).
  bool http_1_1_only = true;
  // The path exactly as given: no "/../" or "/./" folded (a path routed elsewhere).
  bool path_as_is = false;
  // TCP keep-alive probes after this many idle seconds, then every as many (0: none): a
  // remote machine that vanished (no FIN) is noticed.
  int keepalive_probe_s = 0;
  // A kept connection older than this is not reused (0: curl's 118 s): below a server's
  // own keep-alive, so that a reused connection is never one the server just closed.
  int max_connection_age_s = 0;
  // Idle handles kept (each with its connections): a burst of parallel requests must not
  // leave a socket per request open for the process's life.
  size_t max_idle_handles = 48;
  // Errors give curl's sentence for a transport failure ("Failed to connect to h port 1
  // after 0 ms: Connection refused") rather than its code's words ("Couldn't connect to
  // server"; a timeout then says which bounds ran out).
  bool detailed_errors = false;
  // How an error of a transfer cut short by stop() ends: "<request>: cut short, <this>".
  std::string stopping = "the client is stopping";
};

struct Response;

struct Request {
  std::string method = "GET";
  std::string url;
  Headers headers;
  // The body, one of: `body`; `body_length` bytes of `body_fd` from `body_offset`; or what
  // `body_reader` gives. PUT and POST always send one (Content-Length: 0 when empty).
  std::string_view body;
  int body_fd = -1;
  uint64_t body_offset = 0;
  uint64_t body_length = 0;
  // Fills `to` with at most `room` bytes and says how many (0: the end); an error ends
  // the transfer, and perform() returns it as it is. Sent once: a reader is never
  // rewound (a request whose connection closed under it fails rather than resends).
  std::function<Result<size_t>(char* to, size_t room)> body_reader;
  std::optional<uint64_t> body_reader_length;  // none: sent chunked

  // Where the response's body goes: into Response::body, at most `max_body` bytes (a
  // longer one is an error); or, for a 2xx answer, into `sink`, at most `sink_capacity`
  // bytes (ranged reads land in the caller's buffer without a copy; the transfer stops
  // once it is full, whatever the server would send after); or, whatever the status, to
  // `on_body` as it comes, with the answer's head (false ends the transfer).
  size_t max_body = 64 << 20;
  char* sink = nullptr;
  size_t sink_capacity = 0;
  std::function<bool(const Response& head, std::string_view bytes)> on_body;

  // Asked at each of curl's progress reports (about once a second while a transfer
  // waits, more often while bytes move): true ends the transfer.
  std::function<bool()> cancelled;
  // Sent even once the client is stopped: the clean-up of what stop() cut short (an
  // abort of a multipart upload).
  bool cleanup = false;
  // This request's bounds, instead of the client's.
  std::optional<Limits> limits;
  // How errors name this request: by default its method and its URL without the query.
  std::string what;
};

struct Response {
  long status = 0;
  Headers headers;   // as sent, names in the server's case
  std::string body;  // the body, unless it went to the sink or to on_body
  size_t sunk = 0;   // bytes written to the sink
  // The body's length as the server announced it (none: not announced, or not yet known):
  // set when the body begins and once the transfer ends.
  std::optional<uint64_t> content_length;
  std::string header(std::string_view name) const;  // any case; "" when absent
};

class Client {
 public:
  explicit Client(ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // One attempt. A transport failure (refused, reset, stalled, timed out, cut short) is
  // an error naming the request (kTimeout when a bound ran out, kBusy with ECANCELED
  // when stopped or cancelled, else kRemote); any HTTP status is a response.
  Result<Response> perform(const Request& request);

  // Transfers under way end at their next progress report (within a second) and new
  // ones fail at once, but for clean-up requests. One atomic store: a signal handler may
  // call it.
  void stop() { stopped_.store(true); }
  bool stopped() const { return stopped_.load(); }

 private:
  void* take_handle();
  void give_back(void* handle, bool reusable);

  ClientOptions options_;
  std::atomic<bool> stopped_{false};
  static_assert(std::atomic<bool>::is_always_lock_free);
  std::mutex mutex_;
  std::vector<void*> idle_;  // CURL easy handles; each keeps its connections alive
};

// An HTTP date (Mon, 30 Nov 2026 01:02:03 GMT; and the obsolete forms recipients must read
// too, RFC 850's and asctime's) as a time; 0 when malformed.
std::time_t parse_date(const std::string& text);

// `request`'s name in errors: its `what`, or its method and URL without the query.
std::string request_name(const Request& request);

}  // namespace nsbox::http
