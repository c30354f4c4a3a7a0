#include "isolation/sys/connect.h"

#include <netinet/in.h>
#include <poll.h>

#include <string>

#include "isolation/sys/syscall.h"

namespace nsbox::sys {

Result<UniqueFd> connect_within(const sockaddr_storage& address, int timeout_ms) {
  UniqueFd s(::socket(address.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!s) return fail(sys_error("socket"));
  socklen_t len = address.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  if (::connect(s.get(), reinterpret_cast<const sockaddr*>(&address), len) != 0 && errno != EINPROGRESS)
    return fail(sys_error("connect"));
  pollfd p{s.get(), POLLOUT, 0};
  int n = retry_eintr([&] { return ::poll(&p, 1, timeout_ms); });
  if (n < 0) return fail(sys_error("poll for the connection"));
  if (n == 0) return fail(make_error(ErrorCode::kTimeout, "no answer within " + std::to_string(timeout_ms) + " ms"));
  int err = 0;
  socklen_t err_len = sizeof err;
  if (::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &err_len) != 0) return fail(sys_error("getsockopt(SO_ERROR)"));
  if (err) return fail(sys_error("connect", err));
  return s;
}

}  // namespace nsbox::sys
