// Starting a daemon without copying the caller's memory (isolation/sys/spawn.h): what the
// program gets, and what it does not.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "isolation/sys/child_fds.h"
#include "isolation/sys/spawn.h"
#include "isolation/sys/unique_fd.h"

using namespace nsbox;

namespace {

struct KernelAction {  // the kernel's struct sigaction
  void* handler;
  unsigned long flags;
  void* restorer;
  uint64_t mask;
};

struct Pipe {
  UniqueFd r, w;
  Pipe() {
    int fds[2];
    REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
    r.reset(fds[0]);
    w.reset(fds[1]);
  }
};

// Everything until EOF, waiting at most 10 s in all.
std::string read_to_eof(int fd) {
  std::string out;
  for (int waited_ms = 0; waited_ms < 10000;) {
    pollfd p{fd, POLLIN, 0};
    int n = ::poll(&p, 1, 100);
    if (n == 0) {
      waited_ms += 100;
      continue;
    }
    char buf[4096];
    ssize_t got = ::read(fd, buf, sizeof buf);
    if (got <= 0) return out;
    out.append(buf, static_cast<size_t>(got));
  }
  FAIL("no EOF within 10 s");
  return out;
}

// Runs `script` under /bin/sh as a daemon with `input` on its stdin; its stdout.
std::string run_daemon(const std::string& script, const std::string& input, const char* path = "/bin/sh") {
  Pipe in, out;
  std::string arg0 = "sh", arg1 = "-c", arg2 = script;
  char* argv[] = {arg0.data(), arg1.data(), arg2.data(), nullptr};
  std::string env0 = "PATH=/usr/bin:/bin";
  char* envp[] = {env0.data(), nullptr};
  const int fds[] = {in.r.get(), out.w.get(), -1};
  REQUIRE(sys::spawn_daemon(path, argv, envp, fds) == 0);
  in.r.reset();
  out.w.reset();
  REQUIRE(::write(in.w.get(), input.data(), input.size()) == static_cast<ssize_t>(input.size()));
  in.w.reset();
  return read_to_eof(out.r.get());
}

}  // namespace

TEST_CASE("a daemon runs in its own session, adopted, with only the fds it was given and no signal blocked or ignored") {
  // What the caller has that the program must not: a blocked signal, an ignored one, an
  // fd open across exec. (The shell blocks signals around its own forks, so the masks are
  // read by a child of it, which gets the mask the shell started with.)
  sigset_t usr1, previous;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  REQUIRE(::pthread_sigmask(SIG_BLOCK, &usr1, &previous) == 0);
  struct sigaction ignore{}, old_usr2{};
  ignore.sa_handler = SIG_IGN;
  REQUIRE(::sigaction(SIGUSR2, &ignore, &old_usr2) == 0);
  // And one of the two signals glibc's sigaction() refuses to touch (32: its thread
  // cancellation), ignored as a sanitizer's runtime leaves them: set with the raw call.
  KernelAction ignore_32{reinterpret_cast<void*>(SIG_IGN), 0, nullptr, 0}, old_32{};
  REQUIRE(::syscall(SYS_rt_sigaction, 32, &ignore_32, &old_32, sizeof old_32.mask) == 0);
  UniqueFd inherited(::open("/dev/null", O_RDONLY));  // no O_CLOEXEC
  REQUIRE(inherited.get() >= 0);

  std::string out = run_daemon(
      "read line; echo \"$line\"; cut -d' ' -f1,4,6 /proc/$$/stat; "
      "grep -E '^(SigBlk|SigIgn)' /proc/self/status; ls /proc/$$/fd | tr '\\n' ' '",
      "hello\n");
  ::sigaction(SIGUSR2, &old_usr2, nullptr);
  ::syscall(SYS_rt_sigaction, 32, &old_32, nullptr, sizeof old_32.mask);
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);

  INFO(out);
  std::istringstream lines(out);
  std::string echoed, stat, blocked, ignored, fds;
  std::getline(lines, echoed);
  std::getline(lines, stat);
  std::getline(lines, blocked);
  std::getline(lines, ignored);
  std::getline(lines, fds);
  CHECK(echoed == "hello");  // fd 0 and fd 1 are the pipes given
  long pid = 0, ppid = 0, session = 0;
  REQUIRE(std::istringstream(stat) >> pid >> ppid >> session);
  CHECK(session != ::getsid(0));  // a session of its own (its leader, the intermediate, is gone)
  CHECK(session != pid);          // not a session leader: it could never get a controlling terminal
  CHECK(ppid != ::getpid());      // not our child: adopted when the intermediate exited
  CHECK(blocked == "SigBlk:\t0000000000000000");
  CHECK(ignored == "SigIgn:\t0000000000000000");
  std::vector<std::string> listed;
  std::istringstream fd_words(fds);
  for (std::string w; fd_words >> w;) listed.push_back(w);
  CHECK(std::find(listed.begin(), listed.end(), std::to_string(inherited.get())) == listed.end());
  CHECK(std::find(listed.begin(), listed.end(), "2") != listed.end());  // /dev/null there
}

TEST_CASE("a daemon whose program cannot be exec'd exits at once with status 127, the caller sees EOF, not a hang") {
  CHECK(run_daemon("echo never", "", "/nonexistent/program").empty());
  // Its exit status, as its adopter sees it: a child of ours made subreaper adopts the
  // daemon (a grandchild of the caller) and reaps it. Exit status 0: all as expected;
  // otherwise the number of the first check that failed.
  for (const char* path : {"/nonexistent/program", "/etc/passwd" /* there, not executable */}) {
    INFO(path);
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) ::_exit(1);
      int out[2];
      if (::pipe2(out, O_CLOEXEC) != 0) ::_exit(2);
      char arg0[] = "program";
      char* argv[] = {arg0, nullptr};
      char* envp[] = {nullptr};
      const int fds[] = {-1, out[1], -1};
      if (sys::spawn_daemon(path, argv, envp, fds) != 0) ::_exit(3);  // 0: the failure is the daemon's
      ::close(out[1]);
      pollfd p{out[0], POLLIN, 0};
      char byte;
      if (::poll(&p, 1, 10000) != 1 || ::read(out[0], &byte, 1) != 0) ::_exit(4);  // EOF, at once
      for (int waited_ms = 0;; waited_ms += 10) {  // the intermediate is gone already; the daemon ends
        int status = 0;
        pid_t ended = ::waitpid(-1, &status, WNOHANG);
        if (ended > 0) ::_exit(WIFEXITED(status) && WEXITSTATUS(status) == 127 ? 0 : 5);
        if (ended < 0 || waited_ms >= 10000) ::_exit(6);
        ::usleep(10000);
      }
    }
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
}

TEST_CASE("a child's signals back to their defaults: those ignored or caught are found in /proc and reset, and none is left") {
  // In a child of ours: what it changes is its own. Exit status 0: all as expected;
  // otherwise the number of the first check that failed.
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    struct sigaction ignore{}, catch_it{};
    ignore.sa_handler = SIG_IGN;
    catch_it.sa_handler = [](int) {};
    if (::sigaction(SIGUSR1, &ignore, nullptr) != 0 || ::sigaction(SIGUSR2, &catch_it, nullptr) != 0) ::_exit(10);
    uint64_t before = sys::signals_not_default();
    if (before == ~uint64_t{0}) ::_exit(1);  // /proc/self/status not read
    if (!(before >> (SIGUSR1 - 1) & 1)) ::_exit(2);
    if (!(before >> (SIGUSR2 - 1) & 1)) ::_exit(3);
    sys::default_signals();
    if (sys::signals_not_default() != 0) ::_exit(4);
    struct sigaction now{};
    if (::sigaction(SIGUSR1, nullptr, &now) != 0 || now.sa_handler != SIG_DFL) ::_exit(5);
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
