#include "isolation/network.h"

#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cstring>
#include <string>

#include "isolation/sys/unique_fd.h"

namespace nsbox::network {

Result<Mode> parse_mode(std::string_view name) {
  if (name == "none") return Mode::kNone;
  if (name == "host") return Mode::kHost;
  return fail(make_error(ErrorCode::kInvalidArgument, "unknown network mode '" + std::string(name) + "'",
                         "use --net none (loopback only, the default) or --net host"));
}

std::string_view mode_name(Mode mode) { return mode == Mode::kHost ? "host" : "none"; }

int clone_flags(Mode mode) { return mode == Mode::kNone ? CLONE_NEWNET : 0; }

Result<void> setup_in_child(Mode mode) {
  if (mode != Mode::kNone) return {};
  UniqueFd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock) return fail(sys_error("socket(AF_INET) to configure lo"));
  ifreq req{};
  std::strncpy(req.ifr_name, "lo", IFNAMSIZ - 1);
  if (::ioctl(sock.get(), SIOCGIFFLAGS, &req) != 0) return fail(sys_error("ioctl(SIOCGIFFLAGS, lo)"));
  req.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (::ioctl(sock.get(), SIOCSIFFLAGS, &req) != 0) return fail(sys_error("ioctl(SIOCSIFFLAGS, lo up)"));
  return {};
}

}  // namespace nsbox::network
