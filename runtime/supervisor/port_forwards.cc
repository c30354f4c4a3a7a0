#include "runtime/supervisor/port_forwards.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "isolation/network.h"
#include "isolation/sys/log.h"

namespace nsbox {
namespace {

constexpr uint32_t kEdges = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;

// A loopback address of the host, as a socket address with `port`.
Result<sockaddr_storage> loopback_address(const std::string& host, uint16_t port, socklen_t& length) {
  sockaddr_storage at{};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&at);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&at);
  if (::inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1 && (ntohl(v4->sin_addr.s_addr) >> 24) == 127) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    length = sizeof *v4;
    return at;
  }
  if (::inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1 && IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr)) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    length = sizeof *v6;
    return at;
  }
  return fail(make_error(ErrorCode::kInvalidArgument, "a port forward listens on a loopback address, not '" + host + "'",
                         "use 127.0.0.1 (the default), another 127.x.y.z, or ::1"));
}

// A listening socket at `host`:`port` of the host ("" and "localhost" are 127.0.0.1); the
// forward it makes, with its host and the port bound filled in.
Result<UniqueFd> listen_on_host(ExposedPort& forward) {
  if (forward.host.empty() || forward.host == "localhost") forward.host = "127.0.0.1";
  socklen_t length = 0;
  sockaddr_storage at = NSBOX_TRY(loopback_address(forward.host, forward.host_port, length));
  const std::string where = forward.host + ":" + std::to_string(forward.host_port);
  UniqueFd fd(::socket(at.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return fail(sys_error("socket for the forward of port " + std::to_string(forward.port)));
  int one = 1;
  (void)::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&at), length) != 0) return fail(sys_error("bind " + where));
  if (::listen(fd.get(), 128) != 0) return fail(sys_error("listen on " + where));
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&at), &length) != 0) return fail(sys_error("getsockname " + where));
  forward.host_port = ntohs(at.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&at)->sin_port
                                                    : reinterpret_cast<sockaddr_in6*>(&at)->sin6_port);
  return fd;
}

// Reads what `from` has into `buffer`, up to the bound: false on an error.
bool read_into(int from, std::string& buffer, bool& ended, bool& progress) {
  if (ended || buffer.size() >= PortForwards::kBufferBytes) return true;
  char chunk[16 << 10];
  ssize_t n = ::recv(from, chunk, std::min(sizeof chunk, PortForwards::kBufferBytes - buffer.size()), 0);
  if (n > 0) {
    buffer.append(chunk, static_cast<size_t>(n));
    progress = true;
  } else if (n == 0) {
    ended = progress = true;
  } else if (errno != EAGAIN && errno != EINTR) {
    return false;
  }
  return true;
}

// Writes what it can of `buffer` to `to`: false on an error (the reader went).
bool write_from(int to, std::string& buffer, bool& progress) {
  if (buffer.empty()) return true;
  ssize_t n = ::send(to, buffer.data(), buffer.size(), MSG_NOSIGNAL);
  if (n > 0) {
    buffer.erase(0, static_cast<size_t>(n));
    progress = true;
  } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
    return false;
  }
  return true;
}

}  // namespace

PortForwards::~PortForwards() {
  for (auto& [id, c] : connections_) {
    if (c.connect_timer >= 0) loop_.cancel_timer(c.connect_timer);
    for (const UniqueFd* fd : {&c.outside, &c.inside})
      if (*fd) loop_.remove(fd->get());
  }
  for (auto& [port, l] : listeners_) loop_.remove(l.fd.get());
}

Result<ExposedPort> PortForwards::open(uint16_t port, const std::string& host, uint16_t host_port) {
  if (port == 0) return fail(make_error(ErrorCode::kInvalidArgument, "a port to forward is from 1 to 65535, not 0"));
  if (auto it = listeners_.find(port); it != listeners_.end()) {
    const ExposedPort& f = it->second.forward;
    if ((host.empty() || host == f.host) && (host_port == 0 || host_port == f.host_port)) return f;
    return fail(make_error(ErrorCode::kAlreadyExists,
                           "port " + std::to_string(port) + " is forwarded from " + f.host + ":" + std::to_string(f.host_port),
                           "close that forward first to forward it from another address"));
  }
  if (listeners_.size() >= kMaxForwards)
    return fail(make_error(ErrorCode::kBusy, "a sandbox has at most " + std::to_string(kMaxForwards) + " port forwards",
                           "close one first"));
  ExposedPort forward{port, host, host_port};
  UniqueFd fd = NSBOX_TRY(listen_on_host(forward));
  NSBOX_CHECK(loop_.add(fd.get(), EPOLLIN, [this, port](uint32_t) { accept_on(port); }));
  listeners_[port] = Listener{forward, std::move(fd)};
  log::info("port " + std::to_string(port) + " forwarded from " + forward.host + ":" + std::to_string(forward.host_port));
  return forward;
}

bool PortForwards::close(uint16_t port) {
  auto it = listeners_.find(port);
  if (it == listeners_.end()) return false;
  loop_.remove(it->second.fd.get());
  listeners_.erase(it);  // connections made through it go on until they end
  return true;
}

std::vector<ExposedPort> PortForwards::list() const {
  std::vector<ExposedPort> out;
  for (const auto& [port, l] : listeners_) out.push_back(l.forward);
  return out;
}

void PortForwards::accept_on(uint16_t port) {
  auto it = listeners_.find(port);
  if (it == listeners_.end()) return;
  for (int i = 0; i < 16; ++i) {  // a few per wake-up: the loop has other work
    UniqueFd outside(::accept4(it->second.fd.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!outside) return;
    if (connections_.size() >= kMaxConnections) {
      log::limited(log::Level::kWarn, "port-connections",
                   "a connection to port " + std::to_string(port) + " closed: " + std::to_string(kMaxConnections) +
                       " forwarded connections are open");
      continue;
    }
    if (auto made = connect_inside(std::move(outside), port); !made)
      log::limited(log::Level::kWarn, "port-connect", "forward a connection to port " + std::to_string(port) + ": " + made.error().message);
  }
}

Result<void> PortForwards::connect_inside(UniqueFd outside, uint16_t port) {
  UniqueFd inside;
  if (sandbox_ns_.empty()) {
    inside.reset(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!inside) return fail(sys_error("socket"));
  } else {
    std::vector<int> ns{sandbox_ns_[0].get(), sandbox_ns_[1].get()};
    inside = NSBOX_TRY(network::socket_inside(ns));
  }
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port = htons(port);
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(inside.get(), reinterpret_cast<sockaddr*>(&at), sizeof at) != 0 && errno != EINPROGRESS)
    return fail(sys_error("connect to 127.0.0.1:" + std::to_string(port) + " in the sandbox"));
  const uint64_t id = next_id_++;
  Connection& c = connections_[id];
  c.outside = std::move(outside);
  c.inside = std::move(inside);
  auto added = loop_.add(c.outside.get(), kEdges, [this, id](uint32_t events) { on_event(id, false, events); });
  if (added) added = loop_.add(c.inside.get(), kEdges, [this, id](uint32_t events) { on_event(id, true, events); });
  auto timer = loop_.add_timer(kConnectTimeoutMs, [this, id] {
    if (auto it = connections_.find(id); it != connections_.end() && !it->second.connected) drop(id);
  });
  if (!added || !timer) {
    drop(id);
    return fail(!added ? std::move(added.error()) : std::move(timer.error()));
  }
  c.connect_timer = *timer;
  return {};
}

void PortForwards::on_event(uint64_t id, bool inside, uint32_t events) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  Connection& c = it->second;
  if (inside && !c.connected) {
    int err = 0;
    socklen_t length = sizeof err;
    if (::getsockopt(c.inside.get(), SOL_SOCKET, SO_ERROR, &err, &length) != 0 || err != 0) return drop(id);  // refused
    if (!(events & EPOLLOUT)) return;
    c.connected = true;
    loop_.cancel_timer(c.connect_timer);
    c.connect_timer = -1;
  }
  if (!transfer(c)) return drop(id);
  if (c.outside_ended && c.inside_ended && c.to_inside.empty() && c.to_outside.empty()) drop(id);
}

// Edge-triggered: moves bytes until nothing moves, so that no readiness is left unused.
bool PortForwards::transfer(Connection& c) {
  for (bool progress = true; progress;) {
    progress = false;
    if (!read_into(c.outside.get(), c.to_inside, c.outside_ended, progress)) return false;
    if (c.connected) {
      if (!write_from(c.inside.get(), c.to_inside, progress)) return false;
      if (!read_into(c.inside.get(), c.to_outside, c.inside_ended, progress)) return false;
    }
    if (!write_from(c.outside.get(), c.to_outside, progress)) return false;
    // A side's EOF goes on to the other once what it sent before is through.
    if (c.connected && c.outside_ended && c.to_inside.empty() && !c.inside_shut) {
      ::shutdown(c.inside.get(), SHUT_WR);
      c.inside_shut = true;
    }
    if (c.inside_ended && c.to_outside.empty() && !c.outside_shut) {
      ::shutdown(c.outside.get(), SHUT_WR);
      c.outside_shut = true;
    }
  }
  return true;
}

void PortForwards::drop(uint64_t id) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  Connection& c = it->second;
  if (c.connect_timer >= 0) loop_.cancel_timer(c.connect_timer);
  for (const UniqueFd* fd : {&c.outside, &c.inside})
    if (*fd) loop_.remove(fd->get());
  c.connect_timer = -1;
  // The callbacks of this batch may still hold it: it goes once they are done (no event
  // reaches it meanwhile: its descriptors left the loop).
  loop_.defer([this, id] { connections_.erase(id); });
}

}  // namespace nsbox
