#include "mounts/http/client.h"

#include <curl/curl.h>
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

namespace nsbox::http {
namespace {

// Per request in flight (curl frees them when a transfer ends): the receive buffer, and the
// send buffer of a body (and, over TLS, of every request).
constexpr long kReceiveBuffer = 256 << 10, kSendBuffer = 512 << 10;

// One transfer's state, shared with libcurl's callbacks.
struct Transfer {
  Transfer(const Request& r, Response& out, CURL* h, const Client& c) : request(r), response(out), handle(h), client(c) {}
  const Request& request;
  Response& response;
  CURL* handle;
  const Client& client;
  uint64_t sent = 0;
  bool body_begun = false;
  bool too_large = false;
  bool sink_full = false;  // the transfer was stopped there: what was asked for has come
  bool refused_by_receiver = false;
  bool cancelled = false;
  std::optional<Error> reader_error;
};

bool is_2xx(long status) { return status >= 200 && status < 300; }

void note_length(Transfer& t) {
  curl_off_t known = -1;
  if (curl_easy_getinfo(t.handle, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &known) == CURLE_OK && known >= 0)
    t.response.content_length = static_cast<uint64_t>(known);
}

size_t on_body(char* data, size_t size, size_t count, void* user) {
  auto& t = *static_cast<Transfer*>(user);
  const Request& r = t.request;
  size_t n = size * count;
  if (!t.body_begun) {
    t.body_begun = true;
    curl_easy_getinfo(t.handle, CURLINFO_RESPONSE_CODE, &t.response.status);
    note_length(t);
  }
  if (r.on_body) {
    if (r.on_body(t.response, std::string_view(data, n))) return n;
    t.refused_by_receiver = true;
    return 0;  // ends the transfer
  }
  if (r.sink && is_2xx(t.response.status)) {
    size_t room = r.sink_capacity - t.response.sunk;
    size_t take = std::min(room, n);
    std::memcpy(r.sink + t.response.sunk, data, take);
    t.response.sunk += take;
    if (take == n) return n;
    // A longer body than asked for (a server that ignores Range sends the whole object)
    // is cut, not an error, and not read to its end: the transfer stops here, and its
    // connection is closed rather than reused.
    t.sink_full = true;
    return 0;
  }
  if (t.response.body.size() + n > r.max_body) {
    t.too_large = true;
    return 0;
  }
  t.response.body.append(data, n);
  return n;
}

size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto& t = *static_cast<Transfer*>(user);
  size_t n = size * count;
  std::string_view line(data, n);
  if (line.starts_with("HTTP/")) {
    t.response.headers.clear();  // a 100 Continue's headers, or a redirect's, are not ours
    return n;
  }
  auto colon = line.find(':');
  if (colon == std::string_view::npos) return n;
  std::string_view value = line.substr(colon + 1);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' ')) value.remove_suffix(1);
  t.response.headers.emplace_back(std::string(line.substr(0, colon)), std::string(value));
  return n;
}

size_t on_read(char* buffer, size_t size, size_t count, void* user) {
  auto& t = *static_cast<Transfer*>(user);
  const Request& r = t.request;
  size_t want = size * count;
  if (r.body_reader) {
    Result<size_t> got = r.body_reader(buffer, want);
    if (!got) {
      t.reader_error = std::move(got.error());
      return CURL_READFUNC_ABORT;
    }
    t.sent += *got;
    return std::min(*got, want);
  }
  if (r.body_fd < 0) {
    size_t take = std::min<size_t>(want, r.body.size() - t.sent);
    std::memcpy(buffer, r.body.data() + t.sent, take);
    t.sent += take;
    return take;
  }
  size_t take = static_cast<size_t>(std::min<uint64_t>(want, r.body_length - t.sent));
  if (take == 0) return 0;
  ssize_t got = ::pread(r.body_fd, buffer, take, static_cast<off_t>(r.body_offset + t.sent));
  if (got <= 0) {  // the file shrank: never send a short body
    Error e = got < 0 ? sys_error("read the body of " + request_name(r))
                      : make_error(ErrorCode::kSystem, "read the body of " + request_name(r) + ": the file ended at " +
                                                           std::to_string(t.sent) + " of " + std::to_string(r.body_length) + " bytes");
    t.reader_error = std::move(e);
    return CURL_READFUNC_ABORT;
  }
  t.sent += static_cast<uint64_t>(got);
  return static_cast<size_t>(got);
}

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto& t = *static_cast<Transfer*>(user);
  if (t.client.stopped() && !t.request.cleanup) return 1;
  if (!t.request.cancelled || !t.request.cancelled()) return 0;
  t.cancelled = true;
  return 1;
}

// libcurl rewinds when it must resend (a reused connection closed under it).
int on_seek(void* user, curl_off_t offset, int origin) {
  auto& t = *static_cast<Transfer*>(user);
  if (origin != SEEK_SET || t.request.body_reader) return CURL_SEEKFUNC_CANTSEEK;
  t.sent = static_cast<uint64_t>(offset);
  return CURL_SEEKFUNC_OK;
}

Error cut_short(const Request& r, const std::string& why) {
  Error e = make_error(ErrorCode::kBusy, request_name(r) + ": cut short, " + why);
  e.sys_errno = ECANCELED;
  return e;
}

std::string size_words(size_t bytes) {
  return bytes % (1 << 20) == 0 ? std::to_string(bytes >> 20) + " MiB" : std::to_string(bytes) + " bytes";
}

// Why a transfer failed, in the words the client's options ask for.
std::string failure_words(const ClientOptions& options, const Limits& limits, CURLcode code, const char* detail) {
  if (options.detailed_errors) return *detail ? detail : curl_easy_strerror(code);
  if (code != CURLE_OPERATION_TIMEDOUT) return curl_easy_strerror(code);
  std::string bounds = "connect " + std::to_string(limits.connect_timeout_ms) + " ms";
  if (limits.stall_timeout_s > 0) bounds += ", or no byte for " + std::to_string(limits.stall_timeout_s) + " s";
  else if (limits.request_timeout_ms > 0) bounds += ", or " + std::to_string(limits.request_timeout_ms) + " ms in all";
  return "no answer (" + bounds + ")";
}

struct SlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};

bool has_header(const Headers& headers, const char* name) {
  return std::any_of(headers.begin(), headers.end(), [&](const auto& kv) { return strcasecmp(kv.first.c_str(), name) == 0; });
}

void set_connection_options(CURL* h, const ClientOptions& o, const Limits& limits, const Request& r) {
  curl_easy_setopt(h, CURLOPT_URL, r.url.c_str());
  if (o.path_as_is) curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
  // HTTP(S) only, and the answer of the server asked: nothing else (file://, a redirect
  // elsewhere) is reached with a request that may carry a signature or a key.
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  if (!o.proxy_from_environment) curl_easy_setopt(h, CURLOPT_PROXY, "");
  if (o.http_1_1_only) curl_easy_setopt(h, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
  curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
  if (o.keepalive_probe_s > 0) {
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, static_cast<long>(o.keepalive_probe_s));
    curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, static_cast<long>(o.keepalive_probe_s));
  }
  if (o.max_connection_age_s > 0) curl_easy_setopt(h, CURLOPT_MAXAGE_CONN, static_cast<long>(o.max_connection_age_s));
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(limits.connect_timeout_ms));
  if (limits.stall_timeout_s > 0) {
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, static_cast<long>(limits.stall_timeout_s));
  }
  if (limits.request_timeout_ms > 0) curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(limits.request_timeout_ms));
  // Bodies are megabytes: larger socket reads and writes than curl's 16/64 KiB mean fewer
  // system calls per byte (on a small machine the store wants the CPU too). Over TLS a read
  // gives one 16 KiB record at most, so this is for plain HTTP mostly. curl refuses a new
  // size on a handle that still holds a buffer (after a failed connect): it keeps its own.
  curl_easy_setopt(h, CURLOPT_BUFFERSIZE, kReceiveBuffer);
  curl_easy_setopt(h, CURLOPT_UPLOAD_BUFFERSIZE, kSendBuffer);
}

// The method, and the body: PUT and POST always send one, another method only when it
// has one (a relayed DELETE with JSON), HEAD never.
void set_method_and_body(CURL* h, const Request& r, Transfer& t) {
  const bool has_body = r.body_reader || r.body_fd >= 0 || !r.body.empty();
  std::optional<uint64_t> size = r.body_reader ? r.body_reader_length
                                 : r.body_fd >= 0 ? std::optional<uint64_t>(r.body_length)
                                                  : std::optional<uint64_t>(r.body.size());
  curl_off_t length = size ? static_cast<curl_off_t>(*size) : -1;
  const bool sends_body = r.method == "PUT" || r.method == "POST" || (has_body && r.method != "HEAD");
  if (r.method == "HEAD") {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (r.method == "PUT") {
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    if (size) curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, length);
  } else if (sends_body) {
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, length);
    if (r.method != "POST") curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r.method.c_str());
  } else if (r.method != "GET") {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r.method.c_str());
  }
  if (sends_body) {
    curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(h, CURLOPT_READDATA, &t);
    curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, on_seek);
    curl_easy_setopt(h, CURLOPT_SEEKDATA, &t);
  }
}

void set_callbacks(CURL* h, Transfer& t) {
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(h, CURLOPT_XFERINFODATA, &t);
}

}  // namespace

// curl's parser, not strptime: strptime's %a and %b take the names of the process's
// LC_TIME (a German locale refuses "Mon"), and HTTP dates are English in every locale.
std::time_t parse_date(const std::string& text) {
  std::time_t t = ::curl_getdate(text.c_str(), nullptr);
  return t < 0 ? 0 : t;
}

std::string request_name(const Request& r) {
  return r.what.empty() ? r.method + " " + r.url.substr(0, r.url.find('?')) : r.what;
}

std::string Response::header(std::string_view name) const {
  for (const auto& [n, v] : headers)
    if (n.size() == name.size() && strncasecmp(n.data(), name.data(), n.size()) == 0) return v;
  return {};
}

Client::Client(ClientOptions options) : options_(std::move(options)) {
  static const CURLcode initialized = curl_global_init(CURL_GLOBAL_DEFAULT);
  (void)initialized;
}

Client::~Client() {
  for (void* h : idle_) curl_easy_cleanup(static_cast<CURL*>(h));
}

void* Client::take_handle() {
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

void Client::give_back(void* handle, bool reusable) {
  if (reusable) {
    curl_easy_reset(static_cast<CURL*>(handle));  // its options go; its live connections stay
    std::lock_guard lock(mutex_);
    if (idle_.size() < options_.max_idle_handles) {
      idle_.push_back(handle);
      return;
    }
  }
  curl_easy_cleanup(static_cast<CURL*>(handle));
}

Result<Response> Client::perform(const Request& request) {
  if (stopped() && !request.cleanup) return fail(cut_short(request, options_.stopping));
  CURL* h = static_cast<CURL*>(take_handle());
  if (!h) return fail(make_error(ErrorCode::kInternal, "curl_easy_init failed"));
  const Limits& limits = request.limits ? *request.limits : options_.limits;
  Response response;
  Transfer t{request, response, h, *this};
  std::unique_ptr<curl_slist, SlistDeleter> headers;
  auto add_header = [&](const std::string& line) { headers.reset(curl_slist_append(headers.release(), line.c_str())); };
  for (const auto& [name, value] : request.headers) add_header(name + ": " + value);
  // No "Expect: 100-continue" round trip; no default Content-Type on POST.
  add_header("Expect:");
  if (!has_header(request.headers, "content-type")) add_header("Content-Type:");

  set_connection_options(h, options_, limits, request);
  set_method_and_body(h, request, t);
  set_callbacks(h, t);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.get());
  char detail[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, detail);

  CURLcode code = curl_easy_perform(h);
  if (code == CURLE_WRITE_ERROR && t.sink_full) code = CURLE_OK;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &response.status);
  note_length(t);
  // A failed transfer's handle is closed: its connection is in an unknown state.
  give_back(h, code == CURLE_OK);
  if (t.too_large)
    return fail(make_error(ErrorCode::kRemote, request_name(request) + ": a reply larger than " + size_words(request.max_body)));
  if (t.reader_error) return fail(std::move(*t.reader_error));
  if (code == CURLE_ABORTED_BY_CALLBACK || t.refused_by_receiver)
    return fail(cut_short(request, t.cancelled ? "cancelled" : t.refused_by_receiver ? "its receiver stopped it" : options_.stopping));
  if (code != CURLE_OK) {
    ErrorCode ec = code == CURLE_OPERATION_TIMEDOUT ? ErrorCode::kTimeout : ErrorCode::kRemote;
    return fail(make_error(ec, request_name(request) + ": " + failure_words(options_, limits, code, detail)));
  }
  return response;
}

}  // namespace nsbox::http
