#include "isolation/network.h"

#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cstring>
#include <string>

#include "isolation/namespace_child.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox::network {

Result<Mode> parse_mode(std::string_view name) {
  if (name == "none") return Mode::kNone;
  if (name == "host") return Mode::kHost;
  if (name == "allow") return Mode::kAllow;
  if (name == "internet") return Mode::kInternet;
  return fail(make_error(ErrorCode::kInvalidArgument, "unknown network mode '" + std::string(name) + "'",
                         "use --net none (loopback only, the default), --net allow=DOMAIN[,DOMAIN...], --net internet "
                         "or --net host"));
}

std::string_view mode_name(Mode mode) {
  switch (mode) {
    case Mode::kHost: return "host";
    case Mode::kAllow: return "allow";
    case Mode::kInternet: return "internet";
    case Mode::kNone: break;
  }
  return "none";
}

int clone_flags(Mode mode) { return mode == Mode::kHost ? 0 : CLONE_NEWNET; }

Result<void> setup_in_child(Mode mode) {
  if (mode == Mode::kHost) return {};
  UniqueFd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock) return fail(sys_error("socket(AF_INET) to configure lo"));
  ifreq req{};
  std::strncpy(req.ifr_name, "lo", IFNAMSIZ - 1);
  if (::ioctl(sock.get(), SIOCGIFFLAGS, &req) != 0) return fail(sys_error("ioctl(SIOCGIFFLAGS, lo)"));
  req.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (::ioctl(sock.get(), SIOCSIFFLAGS, &req) != 0) return fail(sys_error("ioctl(SIOCSIFFLAGS, lo up)"));
  return {};
}

Result<UniqueFd> listen_inside(pid_t sandbox_pid, uint16_t port) {
  static constexpr const char* kSteps[] = {"setns into the sandbox's user namespace",
                                           "setns into the sandbox's network namespace", "socket", "bind", "listen"};
  // setns into the user namespace first gives the capabilities the network namespace's
  // setns needs, as root or not.
  return namespace_child::make_fd(
      sandbox_pid, {"user", "net"}, kSteps,
      [port](namespace_child::Report& r) {
        r.step = 0;
        if (::setns(0, CLONE_NEWUSER) != 0) return -1;
        r.step = 1;
        if (::setns(1, CLONE_NEWNET) != 0) return -1;
        r.step = 2;
        int sock = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (sock < 0) return -1;
        r.step = 3;
        int one = 1;
        (void)::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        sockaddr_in at{};
        at.sin_family = AF_INET;
        at.sin_port = htons(port);
        at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (::bind(sock, reinterpret_cast<sockaddr*>(&at), sizeof at) != 0) return -1;
        r.step = 4;
        if (::listen(sock, 256) != 0) return -1;
        return sock;
      },
      "listen on 127.0.0.1:" + std::to_string(port) + " in the sandbox");
}

Result<UniqueFd> socket_inside(std::span<const int> ns) {
  static constexpr const char* kSteps[] = {"setns into the sandbox's user namespace",
                                           "setns into the sandbox's network namespace", "socket"};
  return namespace_child::make_fd_sharing_memory(
      ns, kSteps,
      [](namespace_child::Report& r, std::span<const int> fds) {
        r.step = 0;
        if (::setns(fds[0], CLONE_NEWUSER) != 0) return -1;
        r.step = 1;
        if (::setns(fds[1], CLONE_NEWNET) != 0) return -1;
        r.step = 2;
        return ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      },
      "make a socket in the sandbox's network namespace");
}

}  // namespace nsbox::network
