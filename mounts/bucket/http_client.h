// HTTP/1.1 requests to object stores (libcurl): keep-alive connections reused across
// requests and threads, bounded connect and stall times, bodies from memory or from a
// file range, response bodies into memory or straight into the caller's buffer.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "isolation/sys/error.h"
#include "mounts/bucket/sigv4.h"

namespace nsbox::bucket {

struct HttpLimits {
  int connect_timeout_ms = 5000;
  // A request that moves no byte for this long fails: a remote that stops answering
  // gives an error in bounded time instead of a hung reader.
  int stall_timeout_s = 10;
  int request_timeout_s = 0;  // 0: none beyond the stall bound (large transfers take long)
};

struct HttpRequest {
  std::string method = "GET";
  std::string url;
  Headers headers;
  // The body: `body`, or `body_length` bytes of `body_fd` from `body_offset`.
  std::string_view body;
  int body_fd = -1;
  uint64_t body_offset = 0;
  uint64_t body_length = 0;
  // A successful (2xx) response body goes here when set, at most `sink_capacity` bytes
  // (ranged reads land in the FUSE reply buffer without a copy); the transfer stops once
  // it is full, whatever the server would send after.
  char* sink = nullptr;
  size_t sink_capacity = 0;
  // Sent even once the client is stopped: the clean-up of what stop() cut short (an
  // abort of a multipart upload).
  bool cleanup = false;
};

struct HttpResponse {
  long status = 0;
  Headers headers;   // names lowercase
  std::string body;  // the body, unless it went to the sink
  size_t sunk = 0;   // bytes written to the sink
  std::string header(std::string_view name) const;  // "" when absent
};

class HttpClient {
 public:
  explicit HttpClient(HttpLimits limits = {});
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // One attempt. A transport failure (refused, reset, stalled, timed out) is an error
  // naming the method and URL; any HTTP status is a response.
  Result<HttpResponse> perform(const HttpRequest& request);
  const HttpLimits& limits() const { return limits_; }

  // The mount is going away: transfers under way end at their next progress report
  // (within a second) and new ones fail at once, but for clean-up requests. One atomic
  // store: a signal handler may call it.
  void stop() { stopped_.store(true); }
  bool stopped() const { return stopped_.load(); }

 private:
  void* take_handle();
  void give_back(void* handle);

  HttpLimits limits_;
  std::atomic<bool> stopped_{false};
  static_assert(std::atomic<bool>::is_always_lock_free);
  std::mutex mutex_;
  std::vector<void*> idle_;  // CURL easy handles; each keeps its connections alive
};

}  // namespace nsbox::bucket
