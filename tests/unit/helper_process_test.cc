// The one way the supervisor runs its host-side helpers (runtime/supervisor/helper_process.h):
// exactly the fds and environment given, a moved helper still owned once, reaping that
// says how it ended, and a stop that is bounded even for a helper that ignores SIGTERM.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include "runtime/supervisor/helper_process.h"

using namespace nsbox;

namespace {

bool alive(pid_t pid) { return pid > 0 && ::kill(pid, 0) == 0; }

// Waits (bounded) until the helper's pidfd says it has exited.
bool exited_within(const HelperProcess& h, int ms) {
  pollfd p{h.pidfd(), POLLIN, 0};
  return ::poll(&p, 1, ms) == 1;
}

}  // namespace

TEST_CASE("a helper gets exactly its fds and environment, and reaping says how it ended") {
  int pipe_fds[2];
  REQUIRE(::pipe2(pipe_fds, O_CLOEXEC) == 0);
  // fd 3 of the child is the pipe's write end; fd 4 and above are closed; the environment is ours alone.
  auto h = HelperProcess::start({"/bin/sh",
                                 {"sh", "-c", "echo \"$NSBOX_X $(ls /proc/self/fd | sort -n | tr '\\n' ' ')\" >&3; exit 7"},
                                 {-1, -1, -1, pipe_fds[1]},
                                 {"NSBOX_X=given", "PATH=/usr/bin:/bin"},
                                 "a test helper"});
  REQUIRE(h);
  ::close(pipe_fds[1]);
  char buf[256] = {};
  ssize_t n = ::read(pipe_fds[0], buf, sizeof buf - 1);
  ::close(pipe_fds[0]);
  REQUIRE(n > 0);
  // ls itself opens one more (its directory): 0 1 2 3 and that one.
  CHECK(std::string(buf).starts_with("given 0 1 2 3 "));
  REQUIRE(exited_within(*h, 10000));
  CHECK(h->reap() == "exited with status 7");
  CHECK(!h->running());
  CHECK(h->reap().empty());  // once
}

TEST_CASE("a moved helper is owned once: the moved-from object neither kills nor reaps it") {
  auto started = HelperProcess::start({"/bin/sleep", {"sleep", "30"}, {-1, -1, -1}, {}, "a sleeper"});
  REQUIRE(started);
  pid_t pid = started->pid();
  HelperProcess moved;
  {
    HelperProcess temporary = std::move(*started);
    moved = std::move(temporary);
  }  // `temporary` and `*started` go: the sleeper must not
  CHECK(alive(pid));
  CHECK(moved.pid() == pid);
  CHECK(started->pid() == 0);
  moved.stop(1000);
  CHECK(!moved.running());
}

namespace {

// What a helper wrote on its stdout (a pipe) until it closed or `until` showed up: at
// most 30 s.
std::string read_until(int fd, const std::string& until) {
  std::string got;
  char buf[256];
  while (got.find(until) == std::string::npos) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 30000) != 1) break;
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

}  // namespace

TEST_CASE("stop_all ends helpers together: SIGTERM, then SIGKILL for one that ignores it") {
  int out[2];
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  auto polite = HelperProcess::start({"/bin/sleep", {"sleep", "30"}, {-1, -1, -1}, {}, "polite"});
  // It says once SIGTERM is ignored; a short sleep in its loop, so that no child of its
  // outlives it by more than that.
  auto stubborn = HelperProcess::start({"/bin/sh", {"sh", "-c", "trap '' TERM; echo trapped; while :; do sleep 0.05; done"},
                                        {-1, out[1], -1}, {"PATH=/usr/bin:/bin"}, "stubborn"});
  ::close(out[1]);
  REQUIRE(polite);
  REQUIRE(stubborn);
  pid_t a = polite->pid(), b = stubborn->pid();
  REQUIRE(read_until(out[0], "trapped\n") == "trapped\n");
  HelperProcess::stop_all({&*polite, &*stubborn}, 300, 2000);
  CHECK(!alive(a));
  CHECK(!alive(b));
  CHECK(!polite->running());
  CHECK(!stubborn->running());
  ::close(out[0]);
}
