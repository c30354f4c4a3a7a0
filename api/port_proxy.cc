#include "api/port_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>

#include "api/api_service.h"
#include "isolation/sys/connect.h"
#include "isolation/sys/files.h"
#include "isolation/sys/http_text.h"
#include "runtime/core/port_number.h"

namespace nsbox::api {
namespace {

// "/v1/sandboxes/{id}/ports/{P}" and what follows, in the target as sent.
std::optional<TunnelTarget> by_path(const HttpRequest& r) {
  constexpr std::string_view kBase = "/v1/sandboxes/";
  const std::string& t = r.target;
  if (!t.starts_with(kBase)) return std::nullopt;
  size_t id_end = t.find('/', kBase.size());
  if (id_end == std::string::npos || id_end == kBase.size()) return std::nullopt;
  constexpr std::string_view kPorts = "/ports/";
  if (t.compare(id_end, kPorts.size(), kPorts) != 0) return std::nullopt;
  size_t port_at = id_end + kPorts.size();
  size_t port_end = t.find_first_of("/?", port_at);
  if (port_end == std::string::npos) port_end = t.size();
  auto port = parse_port(std::string_view(t).substr(port_at, port_end - port_at));
  // /ports/{P} alone, without a slash after it, is the forward's DELETE route (a client
  // asking for the app's root gives the slash, as a browser does).
  if (!port || port_end == t.size() || t[port_end] != '/') return std::nullopt;
  TunnelTarget out;
  out.sandbox = t.substr(kBase.size(), id_end - kBase.size());
  out.port = *port;
  out.prefix = t.substr(0, port_end);
  out.target = t.substr(port_end);
  return out;
}

// "{P}-{id}.{domain}[:port]".
std::optional<TunnelTarget> by_host(const HttpRequest& r, const std::string& domain) {
  if (domain.empty() || r.host.empty()) return std::nullopt;
  std::string host = r.host;
  if (auto colon = host.rfind(':'); colon != std::string::npos && host.find(']') == std::string::npos) host.resize(colon);
  const std::string suffix = "." + domain;
  if (host.size() <= suffix.size() || !sys::iequals(std::string_view(host).substr(host.size() - suffix.size()), suffix)) return std::nullopt;
  std::string label = host.substr(0, host.size() - suffix.size());
  size_t dash = label.find('-');
  if (dash == std::string::npos) return std::nullopt;
  auto port = parse_port(std::string_view(label).substr(0, dash));
  std::string sandbox = label.substr(dash + 1);
  if (!port || sandbox.empty()) return std::nullopt;
  return TunnelTarget{sandbox, *port, r.target, ""};
}

}  // namespace

std::string url_domain(const std::string& url) {
  size_t start = url.find("://");
  if (start == std::string::npos) return "";
  start += 3;
  size_t end = url.find_first_of(":/?#", start);
  std::string host = url.substr(start, (end == std::string::npos ? url.size() : end) - start);
  if (host.empty() || host.front() == '[') return "";  // an IPv6 address
  bool address = std::all_of(host.begin(), host.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; });
  bool name = std::all_of(host.begin(), host.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-';
  });
  return address || !name ? "" : host;
}

std::optional<TunnelTarget> tunnel_target(const HttpRequest& r, const std::string& domain) {
  if (auto t = by_host(r, domain)) return t;
  return by_path(r);
}

std::string upstream_head(const HttpRequest& r, const TunnelTarget& t) {
  bool upgrade = false;
  for (const auto& [name, value] : r.headers) upgrade = upgrade || sys::iequals(name, "Upgrade");
  std::string head = r.method + " " + t.target + " HTTP/1.1\r\n";
  const bool by_path = !t.prefix.empty();
  for (const auto& [name, value] : r.headers) {
    if (sys::has_control(name) || sys::has_control(value)) continue;
    if (sys::iequals(name, "Authorization") || sys::iequals(name, "X-Nsbox-Forwarded-By")) continue;  // the server's, never the sandbox's
    if (by_path && (sys::iequals(name, "Cookie") || sys::iequals(name, "Host"))) continue;
    if (sys::iequals(name, "Connection") && !upgrade) continue;
    if (sys::iequals(name, "Keep-Alive") || sys::iequals(name, "Proxy-Connection") || sys::iequals(name, "X-Forwarded-Prefix")) continue;
    head += name + ": " + value + "\r\n";
  }
  if (by_path) head += "Host: 127.0.0.1:" + std::to_string(t.port) + "\r\nX-Forwarded-Prefix: " + t.prefix + "\r\n";
  if (!r.host.empty() && !sys::has_control(r.host)) head += "X-Forwarded-Host: " + r.host + "\r\n";
  if (!upgrade) head += "Connection: close\r\n";
  return head + "\r\n";
}

namespace {

constexpr int kConnectMs = 10000;

// The supervisor writes a forward's address, so this is corruption, not a caller's mistake.
Error unreadable_address(const ExposedPort& f) {
  return make_error(ErrorCode::kInternal, "the forward of port " + std::to_string(f.port) + " has an address that does not parse: " + f.host);
}

// A loopback connection to the sandbox's forward, made within kConnectMs.
Result<UniqueFd> connect_forward(const ExposedPort& f) {
  sockaddr_storage addr{};
  if (f.host.find(':') == std::string::npos) {
    auto* in = reinterpret_cast<sockaddr_in*>(&addr);
    in->sin_family = AF_INET;
    in->sin_port = htons(f.host_port);
    if (::inet_pton(AF_INET, f.host.c_str(), &in->sin_addr) != 1) return fail(unreadable_address(f));
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&addr);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(f.host_port);
    if (::inet_pton(AF_INET6, f.host.c_str(), &in6->sin6_addr) != 1) return fail(unreadable_address(f));
  }
  auto fd = sys::connect_within(addr, kConnectMs);
  if (!fd && fd.error().code == ErrorCode::kTimeout)
    return fail(make_error(ErrorCode::kTimeout, "the forward of port " + std::to_string(f.port) + " did not answer in 10 s"));
  if (!fd) return fail(std::move(fd.error()).context("the forward of port " + std::to_string(f.port) + " at " + f.host + ":" +
                                                     std::to_string(f.host_port)));
  return fd;
}

}  // namespace

Result<std::shared_ptr<void>> TunnelCount::take(const std::string& sandbox) {
  std::lock_guard lock(mutex_);
  if (total_ >= kMaxTunnels)
    return fail(make_error(ErrorCode::kBusy, "the server holds " + std::to_string(total_) + " tunnels to sandboxes' ports, its limit"));
  int& mine = per_sandbox_[sandbox];
  if (mine >= kMaxPerSandbox)
    return fail(make_error(ErrorCode::kBusy, "sandbox " + sandbox + " has " + std::to_string(mine) + " tunnels to its ports, the limit",
                           "its loopback forwards (POST .../ports) are not counted here"));
  ++mine;
  ++total_;
  return std::shared_ptr<void>(nullptr, [this, sandbox](void*) {
    std::lock_guard l(mutex_);
    --total_;
    if (--per_sandbox_[sandbox] == 0) per_sandbox_.erase(sandbox);
  });
}

void ApiService::port_tunnel(Exchange& x, const TunnelTarget& t) {
  // The sandbox's own id, so that a name and an id count as one.
  auto info = runtime_.inspect(t.sandbox);
  if (!info) return respond_error(x, info.error());
  auto hold = tunnels_->take(info->record.id);
  if (!hold) return respond_error(x, hold.error());
  auto forward = runtime_.expose_port(info->record.id, t.port);
  if (!forward) return respond_error(x, forward.error());
  auto upstream = connect_forward(*forward);
  if (!upstream) return respond_error(x, upstream.error());
  pollfd p{upstream->get(), POLLOUT, 0};
  std::string head = upstream_head(x.request(), t);
  for (size_t sent = 0; sent < head.size();) {  // a few KiB into a fresh loopback socket
    if (::poll(&p, 1, kConnectMs) != 1) return respond_error(x, make_error(ErrorCode::kTimeout, "the forward took no request"));
    ssize_t n = ::send(upstream->get(), head.data() + sent, head.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) return respond_error(x, sys_error("send the request to port " + std::to_string(t.port)));
    if (n > 0) sent += static_cast<size_t>(n);
  }
  x.tunnel(std::move(*upstream), t.port, std::move(*hold));
}

}  // namespace nsbox::api
