// /etc/subuid and /etc/subgid as newuidmap reads them, and a call made in a forked child
// (what a rootless sandbox's accounts are mapped and reached through).
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "isolation/subordinate_ids.h"
#include "isolation/sys/forked_call.h"

using nsbox::subids::grant_in;

TEST_CASE("subordinate ids: the first line for the user, by name or by uid") {
  std::string text = "alice:100000:65536\nbob:200000:1000\n";
  CHECK(grant_in(text, "bob", 1001).start == 200000);
  CHECK(grant_in(text, "bob", 1001).count == 1000);
  CHECK(grant_in("1001:300000:10\nbob:200000:1000\n", "bob", 1001).start == 300000);
  CHECK(grant_in(text, "carol", 1002).count == 0);
  // A name that only starts like the user's, or a line that is not three fields, is not it.
  CHECK(grant_in("bobby:1:2\nbob:x:5\nbob:5\nbob:7:0\nbob:9:3:extra\n", "bob", 1001).count == 0);
  // A range past 2^32 is no range.
  CHECK(grant_in("bob:4294967290:10\n", "bob", 1001).count == 0);
  CHECK(grant_in("bob:4294901760:65535", "bob", 1001).holds(4294901760u + 65534));
  CHECK(!grant_in("bob:100:10", "bob", 1001).holds(110));
  CHECK(!grant_in("bob:100:10", "bob", 1001).holds(99));
}

TEST_CASE("forked call: the child's answer, its fd and its error come back as the caller's") {
  nsbox::sys::ChildCall call;
  call.what = "answer";
  call.work = []() -> nsbox::Result<nsbox::sys::ChildAnswer> {
    int p[2];
    if (::pipe(p) != 0) return nsbox::fail(nsbox::sys_error("pipe"));
    (void)!::write(p[1], "through", 7);
    ::close(p[1]);
    return nsbox::sys::ChildAnswer{std::to_string(::getpid()), nsbox::UniqueFd(p[0])};
  };
  auto a = call_in_child(call);
  REQUIRE(a);
  CHECK(a->bytes != std::to_string(::getpid()));
  char buf[16] = {};
  CHECK(::read(a->fd.get(), buf, sizeof buf) == 7);
  CHECK(std::string(buf) == "through");

  call.work = []() -> nsbox::Result<nsbox::sys::ChildAnswer> {
    errno = EACCES;
    return nsbox::fail(nsbox::sys_error("open /x").with_hint("ask"));
  };
  auto e = call_in_child(call);
  REQUIRE(!e);
  CHECK(e.error().code == nsbox::ErrorCode::kPermissionDenied);
  CHECK(e.error().sys_errno == EACCES);
  CHECK(e.error().message == "open /x: Permission denied");
  CHECK(e.error().hint == "ask");

  // A step first in the child, then one in the parent while it waits, then the work.
  int order[2];
  REQUIRE(::pipe(order) == 0);
  call.prepare = [&]() -> nsbox::Result<void> {
    (void)!::write(order[1], "c", 1);
    return {};
  };
  call.in_parent = [&](pid_t) -> nsbox::Result<void> {
    (void)!::write(order[1], "p", 1);
    return {};
  };
  call.work = [&]() -> nsbox::Result<nsbox::sys::ChildAnswer> {
    (void)!::write(order[1], "w", 1);
    return nsbox::sys::ChildAnswer{"ok", {}};
  };
  REQUIRE(call_in_child(call));
  char seen[4] = {};
  CHECK(::read(order[0], seen, 3) == 3);
  CHECK(std::string(seen) == "cpw");
  ::close(order[0]);
  ::close(order[1]);

  // A child that dies without an answer is said to have, with how.
  call.prepare = {};
  call.work = []() -> nsbox::Result<nsbox::sys::ChildAnswer> { ::_exit(3); };
  auto lost = call_in_child(call);
  REQUIRE(!lost);
  CHECK(lost.error().message.find("gave no answer (it exited with status 3)") != std::string::npos);
  // Nothing is left to reap.
  CHECK(::waitpid(-1, nullptr, WNOHANG) == -1);
}
