// A child that shares the caller's memory (namespace_child::run_sharing_memory): what it
// writes, the caller sees; its fd table and cwd are its own; a failed step is named.
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <climits>
#include <cstring>
#include <string>

#include "isolation/namespace_child.h"

using nsbox::namespace_child::Report;

namespace {
constexpr const char* kSteps[] = {"the first step", "close the descriptor"};
}

TEST_CASE("a child sharing our memory writes into it, and its fds and cwd stay its own", "[namespace_child]") {
  int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  char before[PATH_MAX];
  REQUIRE(::getcwd(before, sizeof before) != nullptr);
  int seen_ns = -1;
  auto ran = nsbox::namespace_child::run_sharing_memory(
      ::getpid(), {"mnt"}, kSteps,
      [&](Report& r, std::span<const int> ns) {
        seen_ns = ns[0];
        r.step = 1;
        if (::chdir("/") != 0) return -1;
        return ::close(fd);
      },
      "test");
  INFO((ran ? std::string() : ran.error().message));
  REQUIRE(ran);
  CHECK(seen_ns >= 0);
  CHECK(::fcntl(fd, F_GETFD) >= 0);  // closed in the child's table only
  char after[PATH_MAX];
  REQUIRE(::getcwd(after, sizeof after) != nullptr);
  CHECK(std::string(after) == before);
  ::close(fd);
}

TEST_CASE("a failed step of a child sharing our memory is named, with its errno", "[namespace_child]") {
  auto ran = nsbox::namespace_child::run_sharing_memory(
      ::getpid(), {"mnt"}, kSteps,
      [](Report& r, std::span<const int>) {
        r.step = 1;
        return ::close(-1);
      },
      "attach x at /y in the sandbox");
  REQUIRE_FALSE(ran);
  CHECK(ran.error().message == "attach x at /y in the sandbox: close the descriptor: " + std::string(std::strerror(EBADF)));
  CHECK(ran.error().code == nsbox::ErrorCode::kSystem);
}
