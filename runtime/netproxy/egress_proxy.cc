#include "runtime/netproxy/egress_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "isolation/sys/connect.h"
#include "isolation/sys/files.h"
#include "isolation/sys/log.h"
#include "isolation/sys/rfc3339.h"
#include "isolation/sys/syscall.h"
#include "isolation/sys/unique_fd.h"
#include "runtime/core/address_class.h"
#include "runtime/netproxy/proxy_parsers.h"
#include "runtime/protocol/frame.h"

namespace nsbox::net {
namespace {

using protocol::Json;

constexpr size_t kRelayBuffer = 1024 * 1024;  // a pipe of this size where /proc/sys/fs/pipe-max-size allows

void set_timeout(int fd, int seconds) {
  timeval tv{seconds, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

// Reads until `done(buffer)` or `limit` bytes, within `seconds` in all (a client that
// trickles a byte at a time does not hold its slot longer); false at EOF, the deadline
// or the limit. Each recv is bounded by the socket's receive timeout too.
template <class Done>
bool read_until(int fd, std::string& buffer, size_t limit, int seconds, Done done) {
  char chunk[16384];
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (!done(buffer)) {
    if (buffer.size() >= limit || std::chrono::steady_clock::now() > deadline) return false;
    ssize_t n = ::recv(fd, chunk, std::min(sizeof chunk, limit - buffer.size()), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    buffer.append(chunk, static_cast<size_t>(n));
  }
  return true;
}

std::string http_answer(int status, const std::string& body) {
  const char* reason = status == 403 ? "Forbidden" : status == 502 ? "Bad Gateway" : status == 503 ? "Service Unavailable"
                                                  : status == 504 ? "Gateway Timeout" : "Bad Request";
  return "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " +
         std::to_string(body.size() + 1) + "\r\nConnection: close\r\nX-Nsbox-Denied: 1\r\n\r\n" + body + "\n";
}

// The addresses of `host`: a literal is itself; an override (tests) answers before DNS.
Result<std::vector<sockaddr_storage>> resolve(const std::string& host, uint16_t port,
                                              const std::map<std::string, std::string>& overrides) {
  std::string name = host;
  if (auto it = overrides.find(host); it != overrides.end()) name = it->second;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_ADDRCONFIG;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(name.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0)
    return fail(make_error(ErrorCode::kNotFound, "could not resolve " + host + ": " + ::gai_strerror(rc)));
  std::vector<sockaddr_storage> out;
  for (addrinfo* a = found; a && out.size() < 16; a = a->ai_next) {
    sockaddr_storage s{};
    std::memcpy(&s, a->ai_addr, std::min<size_t>(a->ai_addrlen, sizeof s));
    out.push_back(s);
  }
  ::freeaddrinfo(found);
  return out;
}

// A connection to exactly `address`, within the timeout.
Result<UniqueFd> connect_to(const sockaddr_storage& address, int timeout_s) {
  UniqueFd s = NSBOX_TRY(sys::connect_within(address, timeout_s * 1000));
  ::fcntl(s.get(), F_SETFL, ::fcntl(s.get(), F_GETFL) & ~O_NONBLOCK);
  int one = 1;
  ::setsockopt(s.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return s;
}

// Both ways until both sides have ended, or nothing moved for `idle_s`. The bytes go
// through a pipe per direction with splice(): they never come up to this process.
void relay(int a, int b, int idle_s) {
  struct Direction {
    int from, to;
    UniqueFd pipe_r, pipe_w;
    bool open = true;  // still reading from `from`
  };
  Direction way[2] = {{a, b, {}, {}}, {b, a, {}, {}}};
  for (auto& d : way) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return;
    d.pipe_r.reset(p[0]);
    d.pipe_w.reset(p[1]);
    (void)::fcntl(p[1], F_SETPIPE_SZ, static_cast<int>(kRelayBuffer));  // a bigger step where allowed
  }
  while (way[0].open || way[1].open) {
    pollfd p[2] = {{a, static_cast<short>(way[0].open ? POLLIN : 0), 0}, {b, static_cast<short>(way[1].open ? POLLIN : 0), 0}};
    int n = sys::retry_eintr([&] { return ::poll(p, 2, idle_s * 1000); });
    if (n <= 0) return;
    for (int i = 0; i < 2; ++i) {
      if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Direction& d = way[i];
      ssize_t got = sys::retry_eintr(
          [&] { return ::splice(d.from, nullptr, d.pipe_w.get(), nullptr, kRelayBuffer, SPLICE_F_MOVE | SPLICE_F_NONBLOCK); });
      if (got < 0 && errno == EAGAIN) continue;
      if (got <= 0) {
        d.open = false;
        ::shutdown(d.to, SHUT_WR);
        if (got < 0) return;
        continue;
      }
      // All of it on to the other side (a blocking socket, its send timeout the bound).
      for (size_t left = static_cast<size_t>(got); left > 0;) {
        ssize_t put = sys::retry_eintr([&] { return ::splice(d.pipe_r.get(), nullptr, d.to, nullptr, left, SPLICE_F_MOVE); });
        if (put <= 0) return;
        left -= static_cast<size_t>(put);
      }
    }
  }
}


}  // namespace

EgressProxy::EgressProxy(ProxyConfig config)
    : config_(std::move(config)), allow_(std::make_shared<const AllowList>(config_.allow)) {}

void EgressProxy::set_allow(AllowList allow) {
  auto next = std::make_shared<const AllowList>(std::move(allow));
  std::lock_guard lock(mutex_);
  allow_ = std::move(next);
  log::info("allowlist now: " + allow_->describe());
}

std::shared_ptr<const AllowList> EgressProxy::allow() const {
  std::lock_guard lock(mutex_);
  return allow_;
}

void EgressProxy::serve(int listen_fd) {
  for (;;) {
    int client = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        if (errno != EINTR && errno != ECONNABORTED) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      log::error(std::string("accept on the proxy's socket: ") + std::strerror(errno));
      ::_exit(1);
    }
    bool room;
    {
      std::lock_guard lock(mutex_);
      room = connections_ < kMaxConnections;
      if (room) ++connections_;
    }
    if (!room) {
      set_timeout(client, 1);
      (void)files::write_all(client, http_answer(503, "nsbox: this sandbox has " + std::to_string(kMaxConnections) +
                                                  " connections open through its proxy already"), "the client");
      ::close(client);
      continue;
    }
    std::thread([this, client] {
      handle(client);
      ::close(client);
      std::lock_guard lock(mutex_);
      --connections_;
    }).detach();
  }
}

void EgressProxy::deny(int client, int status, const std::string& host, uint16_t port, const std::string& reason) {
  log::limited(log::Level::kWarn, "net-denied", "denied " + host + ":" + std::to_string(port) + ": " + reason);
  if (!config_.denial_log.empty()) {
    std::string line = Json{{"time", sys::now_rfc3339()}, {"host", host}, {"port", port}, {"status", status}, {"reason", reason}}
                           .dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
    std::lock_guard lock(mutex_);
    struct stat st{};
    if (::stat(config_.denial_log.c_str(), &st) == 0 && static_cast<size_t>(st.st_size) > kMaxDenialLog)
      ::rename(config_.denial_log.c_str(), (config_.denial_log + ".1").c_str());
    UniqueFd fd(::open(config_.denial_log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (fd) (void)files::write_all(fd.get(), line, config_.denial_log);
  }
  if (status) (void)files::write_all(client, http_answer(status, "nsbox: " + reason), "the client");
}

void EgressProxy::handle(int client) {
  set_timeout(client, kHeadTimeoutS);
  std::string head;
  if (!read_until(client, head, kMaxRequestHead, kHeadTimeoutS,
                  [](const std::string& b) { return b.find("\r\n\r\n") != std::string::npos; })) {
    if (head.size() >= kMaxRequestHead)
      (void)files::write_all(client, http_answer(400, "nsbox: the request head is over 64 KiB"), "the client");
    return;
  }
  size_t head_end = head.find("\r\n\r\n") + 4;
  std::string early = head.substr(head_end);  // what the client sent after its head
  head.resize(head_end);
  std::string error;
  auto request = parse_request_head(head, error);
  if (!request) return (void)files::write_all(client, http_answer(400, "nsbox proxy: " + error), "the client");
  const std::string host = normalize_host(request->host);
  const uint16_t port = request->port;
  if (host.empty()) return deny(client, 400, request->host, port, "'" + request->host + "' is not a host name");

  // The allowlist first: a name it does not hold is never looked up.
  auto list = allow();
  const AllowEntry* rule = list->match(host, port);
  if (!rule)
    return deny(client, 403, host, port,
                host + ":" + std::to_string(port) + " is not in this sandbox's allowlist (" + list->describe() +
                    "); nsbox net ID --allow ... changes it");
  auto addresses = resolve(host, port, config_.resolve_override);
  if (!addresses) return deny(client, 502, host, port, addresses.error().message);
  bool private_ok = list->private_allowed(host);
  std::string refused;
  UniqueFd upstream;
  std::string connect_error;
  for (const auto& address : *addresses) {
    AddressClass c = classify(address);
    if (is_blocked(c) && !private_ok) {
      if (refused.empty())
        refused = host + " resolves to " + address_text(address) + ", a " + std::string(class_name(c)) +
                  " address, which this sandbox may not reach (--net-allow-private " + host + " allows it; rule " +
                  rule->text() + ")";
      continue;
    }
    auto connected = connect_to(address, kConnectTimeoutS);  // exactly the address checked
    if (connected) {
      upstream = std::move(*connected);
      break;
    }
    connect_error = "could not connect to " + host + ":" + std::to_string(port) + " (" + address_text(address) + "): " +
                    connected.error().message;
  }
  if (!upstream) {
    if (!connect_error.empty()) return deny(client, 502, host, port, connect_error);
    return deny(client, 403, host, port, refused.empty() ? host + " has no address" : refused);
  }

  if (request->connect) {
    if (!files::write_all(client, "HTTP/1.1 200 Connection established\r\n\r\n", "the client")) return;
    // The ClientHello names the server the client means: it must be the host allowed.
    std::string hello = early, server_name;
    HelloStatus status = HelloStatus::kNeedMore;
    (void)read_until(client, hello, kMaxClientHello + 5, kHeadTimeoutS, [&](const std::string& b) {
      status = parse_client_hello(b, server_name);
      return status != HelloStatus::kNeedMore;
    });
    if (status == HelloStatus::kNeedMore) return;  // the client went away (or stalled)
    if (status == HelloStatus::kNotTls)
      return deny(client, 0, host, port,
                  "CONNECT " + host + ":" + std::to_string(port) + " carried no TLS: only TLS goes through CONNECT");
    if (status == HelloStatus::kMalformed) return deny(client, 0, host, port, "a malformed TLS ClientHello");
    if (!server_name.empty() && normalize_host(server_name) != host)
      return deny(client, 0, host, port, "the TLS server name '" + server_name + "' is not the CONNECT host " + host);
    early = std::move(hello);
  } else {
    early = request->upstream_head + early;
  }
  // A peer that stops reading stalls a send at most this long, as silence does a read.
  set_timeout(client, kIdleTimeoutS);
  set_timeout(upstream.get(), kIdleTimeoutS);
  if (!files::write_all(upstream.get(), early, "the upstream")) return;
  relay(client, upstream.get(), kIdleTimeoutS);
}

}  // namespace nsbox::net
