// Several fds with one message (isolation/sys/fd_passing.h): the kernel zygote's requests.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <filesystem>
#include <vector>

#include "isolation/sys/fd_passing.h"

using namespace nsbox;

namespace {

size_t open_fds() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// The same open file: equal device and inode.
bool same_file(int a, int b) {
  struct stat sa{}, sb{};
  return ::fstat(a, &sa) == 0 && ::fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

struct Pair {
  UniqueFd a, b;
  Pair() {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) == 0);
    a.reset(fds[0]);
    b.reset(fds[1]);
  }
};

}  // namespace

TEST_CASE("fds travel with one message in order, close-on-exec on arrival") {
  Pair sp;
  int p1[2], p2[2];
  REQUIRE(::pipe(p1) == 0);
  REQUIRE(::pipe(p2) == 0);
  const std::vector<int> sent = {p1[0], p2[1], p1[1]};
  char byte = 'x';
  REQUIRE(sys::send_with_fds(sp.a.get(), &byte, 1, sent) == 1);
  std::vector<UniqueFd> got;
  char in = 0;
  REQUIRE(sys::recv_with_fds(sp.b.get(), &in, 1, got, 4) == 1);
  CHECK(in == 'x');
  REQUIRE(got.size() == 3);
  for (size_t i = 0; i < sent.size(); ++i) {
    CHECK(same_file(got[i].get(), sent[i]));
    CHECK((::fcntl(got[i].get(), F_GETFD) & FD_CLOEXEC));
  }
  for (int fd : {p1[0], p1[1], p2[0], p2[1]}) ::close(fd);
}

TEST_CASE("more fds than the receiver takes are refused, and none of them is kept") {
  Pair sp;
  int p[2];
  REQUIRE(::pipe(p) == 0);
  const std::vector<int> three = {p[0], p[1], p[0]};
  char byte = 'x';
  size_t before = open_fds();
  REQUIRE(sys::send_with_fds(sp.a.get(), &byte, 1, three) == 1);
  std::vector<UniqueFd> got;
  errno = 0;
  CHECK(sys::recv_with_fds(sp.b.get(), &byte, 1, got, 2) == -1);
  CHECK(errno == EPROTO);
  CHECK(got.empty());
  CHECK(open_fds() == before);
  // The one-fd form refuses two the same way.
  REQUIRE(sys::send_with_fds(sp.a.get(), &byte, 1, std::vector<int>{p[0], p[1]}) == 1);
  UniqueFd one;
  CHECK(sys::recv_with_fd(sp.b.get(), &byte, 1, one) == -1);
  CHECK(errno == EPROTO);
  CHECK(!one);
  CHECK(open_fds() == before);
  // And a sender cannot name more than kMaxFds.
  std::vector<int> many(sys::kMaxFds + 1, p[0]);
  CHECK(sys::send_with_fds(sp.a.get(), &byte, 1, many) == -1);
  CHECK(errno == EINVAL);
  ::close(p[0]);
  ::close(p[1]);
}
