#include "mounts/bucket/remote_reply.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <thread>

#include "mounts/bucket/sigv4.h"
#include "mounts/bucket/xml_tree.h"

namespace nsbox::bucket {

std::chrono::milliseconds backoff(int attempt) { return std::chrono::milliseconds(200 << (2 * (attempt - 1))); }

bool retryable(long status) { return status >= 500 || status == 429; }

Call head_call(const std::string& key) {
  Call call;
  call.method = "HEAD";
  call.key = key;
  return call;
}

Call ranged_get_call(const std::string& key, const std::string& etag, uint64_t offset, char* buffer, size_t length,
                     const std::string& range_header) {
  Call call;
  call.key = key;
  call.headers = {{lowercase(range_header), "bytes=" + std::to_string(offset) + "-" + std::to_string(offset + length - 1)}};
  if (!etag.empty()) call.headers.emplace_back("if-match", etag);
  call.sink = buffer;
  call.sink_capacity = length;
  return call;
}

http::ClientOptions store_client_options(const http::Limits& limits) {
  http::ClientOptions options;
  options.limits = limits;
  options.stopping = "the mount is stopping";
  return options;
}

http::Request http_request_for(const Call& call, std::string url) {
  http::Request request;
  request.method = call.method;
  request.url = std::move(url);
  request.sink = call.sink;
  request.sink_capacity = call.sink_capacity;
  request.cleanup = call.cleanup;
  if (call.body_fd >= 0) {
    request.body_fd = call.body_fd;
    request.body_offset = call.body_offset;
    request.body_length = call.body_length;
  } else {
    request.body = call.body;
  }
  return request;
}

Result<http::Response> send_with_retries(http::Client& http, http::Request request,
                                       const std::function<Headers()>& attempt_headers, const std::string& what,
                                       std::initializer_list<long> accepted, const BucketCredentials& secrets) {
  Result<http::Response> response = fail(make_error(ErrorCode::kInternal, "no attempt"));
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(backoff(attempt));
    request.headers = attempt_headers();
    response = http.perform(request);
    if (response && !retryable(response->status)) break;
    if (!response && http.stopped() && !request.cleanup) break;  // cut short: no retry either
  }
  if (!response) return fail(remote_error(EIO, redact(what + ": " + response.error().message, secrets)));
  long status = response->status;
  if ((status >= 200 && status < 300) || std::find(accepted.begin(), accepted.end(), status) != accepted.end())
    return response;
  return fail(remote_error_from_reply(what, *response, secrets));
}

Error remote_error(int err, std::string message) {
  Error e = make_error(ErrorCode::kRemote, std::move(message));
  e.sys_errno = err;
  if (err == ENOENT) e.code = ErrorCode::kNotFound;
  if (err == EACCES) e.code = ErrorCode::kPermissionDenied;
  return e;
}

Error remote_error_from_reply(const std::string& what, const http::Response& response, const BucketCredentials& secrets) {
  int err = EIO;
  if (response.status == 404) err = ENOENT;
  if (response.status == 401 || response.status == 403) err = EACCES;
  if (response.status == 412) err = ESTALE;
  std::string text = what + ": HTTP " + std::to_string(response.status);
  if (auto doc = parse_xml(response.body); doc && doc->name == "Error") {
    std::string code = doc->child_text("Code");
    std::string message = doc->child_text("Message");
    if (auto nl = message.find('\n'); nl != std::string::npos) message.resize(nl);  // Azure adds RequestId lines
    if (!code.empty()) text += " " + code;
    if (!message.empty()) text += ": " + message;
  } else if (std::string code = response.header("x-ms-error-code"); !code.empty()) {
    text += " " + code;  // Azure's HEAD errors have no body
  }
  return remote_error(err, redact(std::move(text), secrets));
}

Result<std::optional<ObjectHead>> object_head(Result<http::Response> response) {
  if (!response) {
    if (response.error().sys_errno == ENOENT) return std::optional<ObjectHead>();
    return fail(std::move(response.error()));
  }
  ObjectHead h;
  h.size = std::strtoull(response->header("content-length").c_str(), nullptr, 10);
  h.mtime = http::parse_date(response->header("last-modified"));
  h.etag = response->header("etag");
  return std::optional<ObjectHead>(std::move(h));
}

Result<size_t> ranged_read_result(Result<http::Response> response, uint64_t offset, const std::string& what,
                                  std::string_view range_header) {
  if (!response) return fail(std::move(response.error()));
  if (response->status == 416) return size_t{0};
  if (response->status == 200 && offset != 0)
    return fail(remote_error(EIO, what + ": the remote ignored the " + std::string(range_header) + " header"));
  return response->sunk;
}

void add_listed(ListPage& page, const std::string& prefix, const std::string& key, bool is_prefix, ObjectEntry entry) {
  if (!is_prefix && key == prefix) {
    page.has_marker = true;
    return;
  }
  size_t tail = is_prefix ? 1 : 0;
  if (key.size() <= prefix.size() + tail || !key.starts_with(prefix)) return;
  entry.name = key.substr(prefix.size(), key.size() - prefix.size() - tail);
  entry.is_prefix = is_prefix;
  page.entries.push_back(std::move(entry));
}

std::time_t parse_iso8601(const std::string& text) {
  std::tm tm{};
  if (!::strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm)) return 0;
  return ::timegm(&tm);
}

}  // namespace nsbox::bucket
