#include "api/peer_client.h"

#include <poll.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <optional>

#include "isolation/sys/log.h"
#include "isolation/sys/syscall.h"
#include "isolation/sys/http_text.h"

namespace nsbox::api {
namespace {

constexpr int kConnectMs = 2000;
constexpr size_t kMaxJsonAnswer = 1 << 20;
constexpr size_t kMaxRelayedHeaders = 16;

http::ClientOptions peer_options() {
  http::ClientOptions o;
  o.limits = {.connect_timeout_ms = kConnectMs, .stall_timeout_s = 0, .request_timeout_ms = 0};
  o.proxy_from_environment = false;  // peers are ours
  o.http_1_1_only = false;
  o.path_as_is = true;  // the path the edge routed, not one curl rewrote
  // A peer that vanishes mid-answer is noticed (no FIN from a machine that is gone).
  o.keepalive_probe_s = 15;
  // Below the peers' 60 s keep-alive: a kept connection is never one the peer just closed
  // (an upload over it could not be sent again).
  o.max_connection_age_s = 50;
  o.max_idle_handles = 64;
  o.detailed_errors = true;
  return o;
}

// How the client's errors name a request to `base_url`.
std::string unanswered(const std::string& base_url) { return "the sandbox's server " + base_url + " does not answer"; }

Error owner_unavailable(Error e) {
  e.code = ErrorCode::kOwnerUnavailable;
  return e;
}

// The answer's headers a client may need (`name` in any case), relayed as the owner sent
// them; the rest (framing, connection) are this connection's own.
bool relayed_header(const std::string& name) {
  std::string lower = name;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (std::string_view keep : {"content-type", "location", "www-authenticate", "retry-after", "cache-control"})
    if (lower == keep) return true;
  return false;
}

// One relayed request's state, shared with the HTTP client's callbacks.
struct Relay {
  explicit Relay(Exchange& exchange) : x(exchange) {}
  Exchange& x;
  bool head_sent = false, client_gone = false, stopping = false, body_broken = false, refused = false;
  int body_fd = -1;  // an upload's

  // The head once the peer's headers are complete: false when the peer rejected our
  // credential (that 401 is not the client's to see: its own token was fine).
  bool send_head(const http::Response& head) {
    if (head_sent) return true;
    if (head.status == 401) return !(refused = true);
    head_sent = true;
    // Whatever the peer sends, no header of ours carries a control character (a forged
    // line) and their number is bounded.
    std::vector<std::pair<std::string, std::string>> headers;
    for (const auto& [name, value] : head.headers)
      if (relayed_header(name) && !sys::has_control(value) && headers.size() < kMaxRelayedHeaders) headers.emplace_back(name, value);
    // The framing is ours: curl has decoded the peer's (chunked or not); a length only
    // when curl knows it, none for answers that have no body.
    std::optional<uint64_t> length = head.content_length;
    if (head.status == 204 || head.status == 304 || (head.status >= 100 && head.status < 200)) length = 0;
    x.relay_head(static_cast<int>(head.status), std::move(headers), length);
    return true;
  }

  bool pass(const http::Response& head, std::string_view bytes) {
    if (!send_head(head)) return false;  // ends the transfer
    if (x.relay_bytes(bytes)) return true;
    client_gone = true;
    return false;
  }

  // The next bytes of the upload, 0 once it came whole.
  Result<size_t> read_upload(char* to, size_t room) {
    ssize_t n = sys::retry_eintr([&] { return ::read(body_fd, to, room); });
    if (n > 0) return static_cast<size_t>(n);
    if (n < 0) {
      body_broken = true;
      return fail(make_error(ErrorCode::kSystem, "read the upload's body: " + std::string(std::strerror(errno))));
    }
    auto complete = x.body_complete();
    if (complete) return size_t{0};
    body_broken = true;
    return fail(std::move(complete.error()));
  }

  // Asked about once a second while a transfer waits: the client left or the server stops.
  bool cancelled() {
    pollfd fds[2] = {{x.cancel_fd(), POLLIN, 0}, {x.gone_fd(), POLLIN, 0}};
    if (::poll(fds, 2, 0) <= 0) return false;
    (fds[0].revents ? stopping : client_gone) = true;
    return true;
  }
};

// The client's words for why a request failed, without the request's name.
std::string_view reason(const Error& e, const std::string& what) {
  std::string_view m = e.message;
  if (m.starts_with(what + ": ")) m.remove_prefix(what.size() + 2);
  return m;
}

}  // namespace

PeerClient::PeerClient(std::string token, std::string shard)
    : token_(std::move(token)), shard_(std::move(shard)), http_(peer_options()) {}

http::Headers PeerClient::headers(bool with_credential) const {
  http::Headers h;
  if (with_credential) h.emplace_back("Authorization", "Bearer " + token_);
  h.emplace_back("X-Nsbox-Forwarded-By", shard_);
  return h;
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
  Relay relay(x);
  http::Request request;
  request.method = r.method;
  request.url = base_url + r.target;
  request.what = unanswered(base_url);
  request.headers = headers(with_credential);
  if (!r.accept.empty()) request.headers.emplace_back("Accept", r.accept);
  if (r.method == "PUT" && r.body.empty() && x.body_fd() >= 0) {
    relay.body_fd = x.body_fd();
    request.headers.emplace_back("Content-Type", "application/octet-stream");
    request.body_reader = [&relay](char* to, size_t room) { return relay.read_upload(to, room); };
    request.body_reader_length = r.content_length;
  } else if (!r.body.empty()) {
    request.headers.emplace_back("Content-Type", "application/json");
    request.body = r.body;
  }
  request.on_body = [&relay](const http::Response& head, std::string_view bytes) { return relay.pass(head, bytes); };
  request.cancelled = [&relay] { return relay.cancelled(); };
  // A stream's owner sends a heartbeat every 15 s: a minute of nothing is a dead peer.
  if (r.wants_stream()) request.limits = http::Limits{.connect_timeout_ms = kConnectMs, .stall_timeout_s = 60};
  Result<http::Response> answer = http_.perform(request);
  if (answer && relay.send_head(*answer)) {  // (a head not sent yet: an answer without a body)
    x.relay_end(true);
    return {};
  }
  if (relay.head_sent) {
    if (!relay.client_gone) log::warn("relay from " + base_url + " broke off: " + std::string(reason(answer.error(), request.what)));
    x.relay_end(false);
    return {};
  }
  if (relay.refused)
    return fail(make_error(ErrorCode::kOwnerUnavailable, "the sandbox's server " + base_url + " refused this server's peer token",
                           "every server needs the same --peer-token-file"));
  if (relay.stopping) return fail(make_error(ErrorCode::kUnavailable, "the server is stopping"));
  if (relay.client_gone) return {};  // nobody to answer
  if (relay.body_broken) return fail(std::move(answer.error()));  // the upload's own error, as it is
  return fail(owner_unavailable(std::move(answer.error())));
}

Result<std::pair<long, Json>> PeerClient::get_json(const std::string& base_url, const std::string& target, long timeout_ms) {
  http::Request request;
  request.url = base_url + target;
  request.what = unanswered(base_url);
  request.headers = headers(true);
  request.max_body = kMaxJsonAnswer;
  request.limits = http::Limits{.connect_timeout_ms = kConnectMs, .stall_timeout_s = 0, .request_timeout_ms = static_cast<int>(timeout_ms)};
  auto answer = http_.perform(request);
  if (!answer) return fail(owner_unavailable(std::move(answer.error())));
  Json j = Json::parse(answer->body, nullptr, false);
  if (j.is_discarded()) j = Json();
  return std::make_pair(answer->status, std::move(j));
}

}  // namespace nsbox::api
