// What S3 and Azure Blob requests and replies have in common: a request before it is
// signed, when and how often to retry, how an error reads (status, the remote's code and
// message, secrets redacted, an errno for the filesystem), what a HEAD and a ranged GET
// answered, and the listings' dates (HTTP's dates: http::parse_date).
#pragma once

#include <chrono>
#include <cstdint>
#include <ctime>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "isolation/sys/error.h"
#include "mounts/bucket/bucket_client.h"
#include "mounts/bucket/mount_spec.h"
#include "mounts/bucket/sigv4.h"

namespace nsbox::bucket {

// One request to the store before its URL is built and it is signed.
struct Call {
  std::string method = "GET";
  std::string key;  // "" for requests on the bucket or container
  std::vector<std::pair<std::string, std::string>> query;
  Headers headers;
  std::string body;
  int body_fd = -1;
  uint64_t body_offset = 0;
  uint64_t body_length = 0;
  char* sink = nullptr;
  size_t sink_capacity = 0;
  bool cleanup = false;  // sent after stop() too (http::Request::cleanup)
};

// A HEAD of `key`, and a GET of [offset, offset + length) into `buffer` pinned to `etag`
// (when not empty) with `range_header` ("Range", "x-ms-range") saying which bytes.
Call head_call(const std::string& key);
Call ranged_get_call(const std::string& key, const std::string& etag, uint64_t offset, char* buffer, size_t length,
                     const std::string& range_header);

// An object store's client: the limits given, the process's proxy settings, HTTP/1.1, and
// "the mount is stopping" when stop() cuts a request short.
http::ClientOptions store_client_options(const http::Limits& limits);

// `call` sent to `url`, without headers. The request points into `call.body`.
http::Request http_request_for(const Call& call, std::string url);

// Three attempts, 0.2 s then 0.8 s apart: with http::Limits' defaults, a remote that stops
// answering fails a request in under 40 s, one that refuses connections in about 1 s.
inline constexpr int kAttempts = 3;
std::chrono::milliseconds backoff(int attempt);
bool retryable(long status);  // 5xx and 429 (throttling)

// Sends `request`, retrying transport failures and retryable answers with backoff (not
// once the client is stopped); each
// attempt gets fresh headers from `attempt_headers` (a new date, a new signature). An
// answer outside 2xx (and `accepted`) is an error with the remote's code and message.
Result<http::Response> send_with_retries(http::Client& http, http::Request request,
                                       const std::function<Headers()>& attempt_headers, const std::string& what,
                                       std::initializer_list<long> accepted, const BucketCredentials& secrets);

// kRemote with sys_errno set: ENOENT, EACCES, ESTALE or EIO.
Error remote_error(int err, std::string message);
// "what: HTTP 403 AccessDenied: Access Denied", the errno from the status.
Error remote_error_from_reply(const std::string& what, const http::Response& response, const BucketCredentials& secrets);

// What a HEAD found: the object's size, mtime and ETag from the headers; none for a
// missing key (ENOENT); other errors as they are.
Result<std::optional<ObjectHead>> object_head(Result<http::Response> response);
// The bytes a ranged GET (sent accepting 416) put in its sink: none at or past the end
// (416), an EIO if the remote sent the whole object for a range not at 0 (it ignored
// `range_header`).
Result<size_t> ranged_read_result(Result<http::Response> response, uint64_t offset, const std::string& what,
                                  std::string_view range_header);

// Adds a listed key, or a common prefix (with its trailing '/'), to `page` under its name
// relative to `prefix`: the prefix's own marker is noted (has_marker), keys outside the
// prefix are skipped. `entry` brings size, mtime and ETag.
void add_listed(ListPage& page, const std::string& prefix, const std::string& key, bool is_prefix, ObjectEntry entry);

std::time_t parse_iso8601(const std::string& text);  // 2026-11-30T01:02:03.000Z; 0 when malformed

}  // namespace nsbox::bucket
