#include "mounts/bucket/http_client.h"

#include <curl/curl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <memory>

namespace nsbox::bucket {
namespace {

constexpr size_t kMaxBufferedBody = 64 << 20;  // listings and errors, never object data

struct Transfer {
  const HttpRequest* request;
  HttpResponse* response;
  CURL* handle;
  const HttpClient* client;
  uint64_t sent = 0;
  bool too_large = false;
  bool sink_full = false;  // the transfer was stopped there: what was asked for has come
};

size_t on_body(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t n = size * count;
  long status = 0;
  curl_easy_getinfo(t->handle, CURLINFO_RESPONSE_CODE, &status);
  if (t->request->sink && status >= 200 && status < 300) {
    size_t room = t->request->sink_capacity - t->response->sunk;
    size_t take = std::min(room, n);
    std::memcpy(t->request->sink + t->response->sunk, data, take);
    t->response->sunk += take;
    if (take == n) return n;
    // A longer body than asked for (a server that ignores Range sends the whole object)
    // is cut, not an error, and not read to its end: the transfer stops here, and its
    // connection is closed rather than reused.
    t->sink_full = true;
    return 0;
  }
  if (t->response->body.size() + n > kMaxBufferedBody) {
    t->too_large = true;
    return 0;
  }
  t->response->body.append(data, n);
  return n;
}

size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t n = size * count;
  std::string_view line(data, n);
  if (line.starts_with("HTTP/")) {
    t->response->headers.clear();  // a 100 Continue's headers, or a redirect's, are not ours
    return n;
  }
  auto colon = line.find(':');
  if (colon == std::string_view::npos) return n;
  std::string name(line.substr(0, colon));
  for (char& c : name)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');  // ASCII, whatever the locale
  std::string_view value = line.substr(colon + 1);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' ')) value.remove_suffix(1);
  t->response->headers.emplace_back(std::move(name), std::string(value));
  return n;
}

size_t on_read(char* buffer, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const HttpRequest& r = *t->request;
  size_t want = size * count;
  if (r.body_fd < 0) {
    size_t take = std::min<size_t>(want, r.body.size() - t->sent);
    std::memcpy(buffer, r.body.data() + t->sent, take);
    t->sent += take;
    return take;
  }
  size_t take = static_cast<size_t>(std::min<uint64_t>(want, r.body_length - t->sent));
  if (take == 0) return 0;
  ssize_t got = ::pread(r.body_fd, buffer, take, static_cast<off_t>(r.body_offset + t->sent));
  if (got <= 0) return CURL_READFUNC_ABORT;  // the staged file shrank: never send a short body
  t->sent += static_cast<uint64_t>(got);
  return static_cast<size_t>(got);
}

// Called at least once a second while a transfer runs: non-zero ends it.
int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  return t->client->stopped() && !t->request->cleanup ? 1 : 0;
}

// libcurl rewinds when it must resend (a reused connection closed under it).
int on_seek(void* user, curl_off_t offset, int origin) {
  auto* t = static_cast<Transfer*>(user);
  if (origin != SEEK_SET) return CURL_SEEKFUNC_CANTSEEK;
  t->sent = static_cast<uint64_t>(offset);
  return CURL_SEEKFUNC_OK;
}

// Errors name the request without its query: a SAS token travels there.
std::string named(const HttpRequest& r) { return r.method + " " + r.url.substr(0, r.url.find('?')); }

Error stopping_error(const HttpRequest& r) {
  Error e = make_error(ErrorCode::kBusy, named(r) + ": cut short, the mount is stopping");
  e.sys_errno = ECANCELED;
  return e;
}

struct SlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};

}  // namespace

std::string HttpResponse::header(std::string_view name) const {
  for (const auto& [n, v] : headers)
    if (n == name) return v;
  return {};
}

HttpClient::HttpClient(HttpLimits limits) : limits_(limits) { curl_global_init(CURL_GLOBAL_DEFAULT); }

HttpClient::~HttpClient() {
  for (void* h : idle_) curl_easy_cleanup(static_cast<CURL*>(h));
}

void* HttpClient::take_handle() {
  {
    std::lock_guard lock(mutex_);
    if (!idle_.empty()) {
      void* h = idle_.back();
      idle_.pop_back();
      return h;
    }
  }
  return curl_easy_init();
}

// Idle handles (each with its connection) are kept up to a bound: a burst of parallel
// requests must not leave a socket per request open for the server's life.
constexpr size_t kMaxIdleHandles = 48;
// Per request in flight (curl frees them when a transfer ends): the receive buffer, and the
// send buffer of a body (and, over TLS, of every request).
constexpr long kReceiveBuffer = 256 << 10, kSendBuffer = 512 << 10;

void HttpClient::give_back(void* handle) {
  curl_easy_reset(static_cast<CURL*>(handle));  // keeps its live connections
  {
    std::lock_guard lock(mutex_);
    if (idle_.size() < kMaxIdleHandles) {
      idle_.push_back(handle);
      return;
    }
  }
  curl_easy_cleanup(static_cast<CURL*>(handle));
}

Result<HttpResponse> HttpClient::perform(const HttpRequest& request) {
  if (stopped() && !request.cleanup) return fail(stopping_error(request));
  CURL* h = static_cast<CURL*>(take_handle());
  if (!h) return fail(make_error(ErrorCode::kInternal, "curl_easy_init failed"));
  HttpResponse response;
  Transfer t{&request, &response, h, this};
  std::unique_ptr<curl_slist, SlistDeleter> headers;
  auto add_header = [&](const std::string& line) { headers.reset(curl_slist_append(headers.release(), line.c_str())); };
  for (const auto& [name, value] : request.headers) add_header(name + ": " + value);
  // No "Expect: 100-continue" round trip; no default Content-Type on POST.
  add_header("Expect:");
  bool has_type = std::any_of(request.headers.begin(), request.headers.end(),
                              [](const auto& kv) { return strcasecmp(kv.first.c_str(), "content-type") == 0; });
  if (!has_type) add_header("Content-Type:");

  curl_easy_setopt(h, CURLOPT_URL, request.url.c_str());
  // Object stores speak HTTP(S) only, and answer where they are asked: nothing else
  // (file://, a redirect elsewhere) is reached with a request that may carry a signature.
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(limits_.connect_timeout_ms));
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, static_cast<long>(limits_.stall_timeout_s));
  if (limits_.request_timeout_s > 0) curl_easy_setopt(h, CURLOPT_TIMEOUT, static_cast<long>(limits_.request_timeout_s));
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(h, CURLOPT_XFERINFODATA, &t);
  curl_easy_setopt(h, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
  curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
  // Bodies are megabytes: larger socket reads and writes than curl's 16/64 KiB mean fewer
  // system calls per byte (on a small machine the store wants the CPU too). Over TLS a read
  // gives one 16 KiB record at most, so this is for plain HTTP mostly. curl refuses a new
  // size on a handle that still holds a buffer (after a failed connect): it keeps its own.
  curl_easy_setopt(h, CURLOPT_BUFFERSIZE, kReceiveBuffer);
  curl_easy_setopt(h, CURLOPT_UPLOAD_BUFFERSIZE, kSendBuffer);

  uint64_t body_size = request.body_fd >= 0 ? request.body_length : request.body.size();
  if (request.method == "HEAD") {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (request.method == "PUT") {
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(body_size));
  } else if (request.method == "POST") {
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body_size));
  } else if (request.method != "GET") {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  }
  if (request.method == "PUT" || request.method == "POST") {
    curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(h, CURLOPT_READDATA, &t);
    curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, on_seek);
    curl_easy_setopt(h, CURLOPT_SEEKDATA, &t);
  }
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.get());

  CURLcode code = curl_easy_perform(h);
  if (code == CURLE_WRITE_ERROR && t.sink_full) code = CURLE_OK;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &response.status);
  give_back(h);
  if (t.too_large)
    return fail(make_error(ErrorCode::kRemote, named(request) + ": a reply larger than " +
                                                   std::to_string(kMaxBufferedBody >> 20) + " MiB"));
  if (code == CURLE_ABORTED_BY_CALLBACK) return fail(stopping_error(request));
  if (code != CURLE_OK) {
    ErrorCode ec = (code == CURLE_OPERATION_TIMEDOUT) ? ErrorCode::kTimeout : ErrorCode::kRemote;
    std::string why = curl_easy_strerror(code);
    if (code == CURLE_OPERATION_TIMEDOUT) why = "no answer (connect " + std::to_string(limits_.connect_timeout_ms) +
                                                " ms, or no byte for " + std::to_string(limits_.stall_timeout_s) + " s)";
    return fail(make_error(ec, named(request) + ": " + why));
  }
  return response;
}

}  // namespace nsbox::bucket
