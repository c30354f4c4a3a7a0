// /etc/subuid and /etc/subgid as newuidmap reads them, and a call made in a forked child
// (what a rootless sandbox's accounts are mapped and reached through).
#include <fcntl.h>
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
  // Trailing blanks are no matter; a range holding id 0 (the host's root) is never one.
  CHECK(grant_in("bob:200000:1000 \r\n", "bob", 1001).count == 1000);
  CHECK(grant_in("bob:0:65536\n", "bob", 1001).count == 0);
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
  call.keep_fds = {order[1]};
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
  call.keep_fds.clear();
  call.prepare = {};
  call.in_parent = {};

  // The child asks the caller midway (a write's commit): the caller's answer decides.
  call.work = []() -> nsbox::Result<nsbox::sys::ChildAnswer> {
    NSBOX_CHECK(nsbox::sys::ask_caller());
    return nsbox::sys::ChildAnswer{"committed", {}};
  };
  bool asked = false;
  call.on_ask = [&]() -> nsbox::Result<void> {
    asked = true;
    return {};
  };
  auto committed = call_in_child(call);
  REQUIRE(committed);
  CHECK(asked);
  CHECK(committed->bytes == "committed");
  call.on_ask = []() -> nsbox::Result<void> { return nsbox::fail(nsbox::make_error(nsbox::ErrorCode::kMalformedRequest, "the body ended early")); };
  auto stopped = call_in_child(call);
  REQUIRE(!stopped);
  CHECK(stopped.error().message == "the body ended early");

  // An answer past its bound is a limit, and a child past its time is ended.
  call.max_bytes = 1024;
  call.work = []() -> nsbox::Result<nsbox::sys::ChildAnswer> { return nsbox::sys::ChildAnswer{std::string(1 << 20, 'x'), {}}; };
  auto big = call_in_child(call);
  REQUIRE(!big);
  CHECK(big.error().code == nsbox::ErrorCode::kLimitExceeded);
  call.timeout_ms = 200;
  call.work = []() -> nsbox::Result<nsbox::sys::ChildAnswer> {
    ::pause();
    return nsbox::sys::ChildAnswer{};
  };
  auto slow = call_in_child(call);
  REQUIRE(!slow);
  CHECK(slow.error().code == nsbox::ErrorCode::kTimeout);

  // The child keeps only the fds it is given: a pipe's write end it was not given is
  // closed in it, so the reader sees the end of file while the child still runs.
  int unshared[2];
  REQUIRE(::pipe(unshared) == 0);
  call.timeout_ms = 10'000;
  call.max_bytes = 1024;
  call.work = [&]() -> nsbox::Result<nsbox::sys::ChildAnswer> {
    return nsbox::sys::ChildAnswer{::fcntl(unshared[1], F_GETFD) == -1 ? "closed" : "open", {}};
  };
  auto kept = call_in_child(call);
  REQUIRE(kept);
  CHECK(kept->bytes == "closed");
  call.keep_fds = {unshared[1]};
  CHECK(call_in_child(call)->bytes == "open");
  ::close(unshared[0]);
  ::close(unshared[1]);
  call.keep_fds.clear();

  // A child that dies without an answer is said to have, with how.
  call.work = []() -> nsbox::Result<nsbox::sys::ChildAnswer> { ::_exit(3); };
  auto lost = call_in_child(call);
  REQUIRE(!lost);
  CHECK(lost.error().message.find("gave no answer (it exited with status 3)") != std::string::npos);
  // Nothing is left to reap.
  CHECK(::waitpid(-1, nullptr, WNOHANG) == -1);
}
