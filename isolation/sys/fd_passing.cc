#include "isolation/sys/fd_passing.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "isolation/sys/syscall.h"

namespace nsbox::sys {

ssize_t send_with_fd(int sock, const void* data, size_t len, int fd) {
  return send_with_fds(sock, data, len, fd >= 0 ? std::span<const int>(&fd, 1) : std::span<const int>());
}

ssize_t recv_with_fd(int sock, void* data, size_t len, UniqueFd& fd) {
  std::vector<UniqueFd> fds;
  ssize_t n = recv_with_fds(sock, data, len, fds, 1);
  if (n >= 0 && !fds.empty()) fd = std::move(fds.front());
  return n;
}

ssize_t send_with_fds(int sock, const void* data, size_t len, std::span<const int> fds) {
  if (fds.size() > kMaxFds) {
    errno = EINVAL;
    return -1;
  }
  iovec io{const_cast<void*>(data), len};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  msghdr msg{};
  msg.msg_iov = &io;
  msg.msg_iovlen = 1;
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  return retry_eintr([&] { return ::sendmsg(sock, &msg, MSG_NOSIGNAL); });
}

ssize_t recv_with_fds(int sock, void* data, size_t len, std::vector<UniqueFd>& fds, size_t max_fds) {
  iovec io{data, len};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  msghdr msg{};
  msg.msg_iov = &io;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n = retry_eintr([&] { return ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC); });
  if (n < 0) return n;
  std::vector<UniqueFd> got;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      got.emplace_back(fd);
    }
  }
  if ((msg.msg_flags & MSG_CTRUNC) || got.size() > max_fds) {
    errno = EPROTO;
    return -1;  // `got` closes them
  }
  fds = std::move(got);
  return n;
}

}  // namespace nsbox::sys
