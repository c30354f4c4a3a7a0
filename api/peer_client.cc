#include "api/peer_client.h"

#include <curl/curl.h>
#include <poll.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <optional>

#include "isolation/sys/log.h"

namespace nsbox::api {
namespace {

constexpr long kConnectMs = 2000;
constexpr size_t kMaxJsonAnswer = 1 << 20;
constexpr size_t kMaxRelayedHeaders = 16;

// The answer's headers a client may need (`lower`: the name in lower case), relayed as the
// owner sent them; the rest (framing, connection) are this connection's own.
bool relayed_header(std::string_view lower) {
  for (std::string_view keep : {"content-type", "location", "www-authenticate", "retry-after", "cache-control"})
    if (lower == keep) return true;
  return false;
}

std::string trim(std::string_view s) {
  while (!s.empty() && (s.back() == '\r' || s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  return std::string(s);
}

// One relayed request's state, shared with libcurl's callbacks.
struct Relay {
  Relay(Exchange& exchange, CURL* handle) : x(exchange), h(handle) {}
  Exchange& x;
  CURL* h;
  long status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  bool head_sent = false, client_gone = false, stopping = false, body_broken = false, refused = false;
  int body_fd = -1;
  int read_errno = 0;

  // The head once the peer's headers are complete: false when the peer rejected our
  // credential (that 401 is not the client's to see: its own token was fine).
  bool send_head() {
    if (head_sent) return true;
    if (status == 401) return !(refused = true);
    head_sent = true;
    // The framing is ours: curl has decoded the peer's (chunked or not); a length only
    // when curl knows it, none for answers that have no body.
    std::optional<uint64_t> length;
    curl_off_t known = -1;
    if (status == 204 || status == 304 || (status >= 100 && status < 200)) length = 0;
    else if (curl_easy_getinfo(h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &known) == CURLE_OK && known >= 0) length = static_cast<uint64_t>(known);
    x.relay_head(static_cast<int>(status), headers, length);
    return true;
  }
};

bool has_control(std::string_view v) {
  for (unsigned char c : v)
    if (c < 0x20 || c == 0x7f) return true;
  return false;
}

size_t on_header(char* data, size_t size, size_t count, void* p) {
  auto& r = *static_cast<Relay*>(p);
  std::string_view line(data, size * count);
  if (line.starts_with("HTTP/")) {  // a status line: a 100 Continue's is followed by the real one
    auto sp = line.find(' ');
    r.status = sp == std::string_view::npos ? 0 : std::strtol(std::string(line.substr(sp + 1, 3)).c_str(), nullptr, 10);
    r.headers.clear();
    return line.size();
  }
  auto colon = line.find(':');
  if (colon == std::string_view::npos) return line.size();
  std::string name = trim(line.substr(0, colon)), value = trim(line.substr(colon + 1));
  std::string lower = name;
  for (char& c : lower) c = static_cast<char>(std::tolower(c));
  // Whatever the peer sends, no header of ours carries a control character (a forged
  // line) and their number is bounded.
  if (relayed_header(lower) && !has_control(value) && r.headers.size() < kMaxRelayedHeaders) r.headers.emplace_back(name, value);
  return line.size();
}

size_t on_body(char* data, size_t size, size_t count, void* p) {
  auto& r = *static_cast<Relay*>(p);
  if (!r.send_head()) return 0;  // ends the transfer
  if (!r.x.relay_bytes(std::string_view(data, size * count))) {
    r.client_gone = true;
    return 0;  // ends the transfer
  }
  return size * count;
}

size_t on_upload(char* buffer, size_t size, size_t count, void* p) {
  auto& r = *static_cast<Relay*>(p);
  for (;;) {
    ssize_t n = ::read(r.body_fd, buffer, size * count);
    if (n < 0 && errno == EINTR) continue;
    if (n > 0) return static_cast<size_t>(n);
    if (n == 0 && r.x.body_complete()) return 0;
    if (n < 0) r.read_errno = errno;
    r.body_broken = true;
    return CURL_READFUNC_ABORT;
  }
}

// Called about once a second while a transfer waits: the client left or the server stops.
int on_progress(void* p, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto& r = *static_cast<Relay*>(p);
  pollfd fds[2] = {{r.x.cancel_fd(), POLLIN, 0}, {r.x.gone_fd(), POLLIN, 0}};
  if (::poll(fds, 2, 0) <= 0) return 0;
  (fds[0].revents ? r.stopping : r.client_gone) = true;
  return 1;
}

size_t on_small_body(char* data, size_t size, size_t count, void* p) {
  auto& out = *static_cast<std::string*>(p);
  if (out.size() + size * count > kMaxJsonAnswer) return 0;
  out.append(data, size * count);
  return size * count;
}

struct HeaderList {
  curl_slist* list = nullptr;
  void add(const std::string& h) { list = curl_slist_append(list, h.c_str()); }
  ~HeaderList() { curl_slist_free_all(list); }
};

void common_options(CURL* h, const std::string& url) {
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);  // the path the edge routed, not one curl rewrote
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, kConnectMs);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_PROXY, "");  // never the process's proxy: peers are ours
  curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
  // A peer that vanishes mid-answer is noticed (no FIN from a machine that is gone).
  curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 15L);
  curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 15L);
  // Below the peers' 60 s keep-alive: a kept connection is never one the peer just closed
  // (an upload over it could not be sent again).
  curl_easy_setopt(h, CURLOPT_MAXAGE_CONN, 50L);
}

Error unreachable(const std::string& base_url, CURLcode rc, const char* detail) {
  return make_error(ErrorCode::kOwnerUnavailable,
                    "the sandbox's server " + base_url + " does not answer: " + (detail && *detail ? detail : curl_easy_strerror(rc)));
}

}  // namespace

PeerClient::PeerClient(std::string token, std::string shard)
    : authorization_("Authorization: Bearer " + token), forwarded_by_("X-Nsbox-Forwarded-By: " + shard) {
  static const CURLcode initialized = curl_global_init(CURL_GLOBAL_DEFAULT);
  (void)initialized;
}

PeerClient::~PeerClient() {
  for (void* h : idle_) curl_easy_cleanup(static_cast<CURL*>(h));
}

void* PeerClient::take_handle() {
  {
    std::lock_guard lock(mutex_);
    if (!idle_.empty()) {
      void* h = idle_.back();
      idle_.pop_back();
      curl_easy_reset(static_cast<CURL*>(h));  // options go; its connections stay
      return h;
    }
  }
  return curl_easy_init();
}

void PeerClient::give_back(void* handle) {
  std::lock_guard lock(mutex_);
  if (idle_.size() < 64) idle_.push_back(handle);
  else curl_easy_cleanup(static_cast<CURL*>(handle));
}

std::string PeerClient::escape(const std::string& segment) {
  std::string out;
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (unsigned char c : segment) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') out += static_cast<char>(c);
    else out += {'%', kHex[c >> 4], kHex[c & 15]};
  }
  return out;
}

Result<void> PeerClient::forward(Exchange& x, const std::string& base_url, bool with_credential) {
  const HttpRequest& r = x.request();
  if (!r.target.starts_with("/")) return fail(make_error(ErrorCode::kMalformedRequest, "the request target must start with '/'"));
  CURL* h = static_cast<CURL*>(take_handle());
  if (!h) return fail(make_error(ErrorCode::kInternal, "curl_easy_init failed"));
  Relay relay(x, h);
  HeaderList headers;
  if (with_credential) headers.add(authorization_);
  headers.add(forwarded_by_);
  headers.add("Expect:");  // no 100-continue round trip: the edge already admitted the body
  if (!r.accept.empty()) headers.add("Accept: " + r.accept);
  common_options(h, base_url + r.target);
  curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r.method.c_str());
  const bool upload = r.method == "PUT" && r.body.empty() && x.body_fd() >= 0;
  if (upload) {
    relay.body_fd = x.body_fd();
    headers.add("Content-Type: application/octet-stream");
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h, CURLOPT_READFUNCTION, on_upload);
    curl_easy_setopt(h, CURLOPT_READDATA, &relay);
    if (r.content_length) curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(*r.content_length));
  } else if (!r.body.empty()) {
    headers.add("Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, r.body.data());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
  }
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.list);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &relay);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &relay);
  curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(h, CURLOPT_XFERINFODATA, &relay);
  curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 256L << 10);
  if (r.wants_stream()) {
    // A stream's owner sends a heartbeat every 15 s: a minute of nothing is a dead peer.
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 60L);
  }
  char detail[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, detail);
  CURLcode rc = curl_easy_perform(h);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, nullptr);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, nullptr);
  if (rc == CURLE_OK && relay.send_head()) {  // (a head not sent yet: an answer without a body)
    x.relay_end(true);
    give_back(h);
    return {};
  }
  curl_easy_cleanup(h);  // its connection is in an unknown state
  if (relay.head_sent) {
    if (!relay.client_gone) log::warn("relay from " + base_url + " broke off: " + (*detail ? detail : curl_easy_strerror(rc)));
    x.relay_end(false);
    return {};
  }
  if (relay.refused)
    return fail(make_error(ErrorCode::kOwnerUnavailable, "the sandbox's server " + base_url + " refused this server's peer token",
                           "every server needs the same --peer-token-file"));
  if (relay.stopping) return fail(make_error(ErrorCode::kUnavailable, "the server is stopping"));
  if (relay.client_gone) return {};  // nobody to answer
  if (relay.body_broken) {
    if (relay.read_errno) return fail(make_error(ErrorCode::kSystem, "read the upload's body: " + std::string(std::strerror(relay.read_errno))));
    return fail(x.body_complete().error());
  }
  return fail(unreachable(base_url, rc, detail));
}

Result<std::pair<long, Json>> PeerClient::get_json(const std::string& base_url, const std::string& target, long timeout_ms) {
  CURL* h = static_cast<CURL*>(take_handle());
  if (!h) return fail(make_error(ErrorCode::kInternal, "curl_easy_init failed"));
  HeaderList headers;
  headers.add(authorization_);
  headers.add(forwarded_by_);
  common_options(h, base_url + target);
  curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
  std::string body;
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.list);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_small_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
  char detail[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, detail);
  CURLcode rc = curl_easy_perform(h);
  long status = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, nullptr);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, nullptr);
  if (rc != CURLE_OK) {
    curl_easy_cleanup(h);
    return fail(unreachable(base_url, rc, detail));
  }
  give_back(h);
  Json j = Json::parse(body, nullptr, false);
  if (j.is_discarded()) j = Json();
  return std::make_pair(status, std::move(j));
}

}  // namespace nsbox::api
