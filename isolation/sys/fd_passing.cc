#include "isolation/sys/fd_passing.h"

#include <sys/socket.h>

#include <cstring>

#include "isolation/sys/syscall.h"

namespace nsbox::sys {

ssize_t send_with_fd(int sock, const void* data, size_t len, int fd) {
  iovec io{const_cast<void*>(data), len};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &io;
  msg.msg_iovlen = 1;
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  return retry_eintr([&] { return ::sendmsg(sock, &msg, MSG_NOSIGNAL); });
}

ssize_t recv_with_fd(int sock, void* data, size_t len, UniqueFd& fd) {
  iovec io{data, len};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &io;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n = retry_eintr([&] { return ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC); });
  if (n < 0) return n;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
    int received;
    std::memcpy(&received, CMSG_DATA(c), sizeof received);
    fd.reset(received);
  }
  return n;
}

}  // namespace nsbox::sys
