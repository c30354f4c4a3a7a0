#include "isolation/sys/forked_call.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "isolation/sys/child_fds.h"
#include "isolation/sys/fd_passing.h"
#include "isolation/sys/program.h"
#include "isolation/sys/syscall.h"

namespace nsbox::sys {
namespace {

// The child's own state (a fork's copy: never shared with the caller).
bool called_child = false;
pid_t caller_pid = 0;
int channel = -1;

// A message of the child's: its kind, the length of what follows, and maybe an fd. The
// caller answers kPrepared and kAsk with one byte: 'G' (go on) or 'S' (stop).
enum Kind : char { kPrepared = 'P', kAsk = 'Q', kAnswer = 'A', kFailed = 'E' };
struct Header {
  char kind;
  uint32_t length;
} __attribute__((packed));

// An Error as bytes: code, errno, message and hint, NUL-separated.
std::string encode(const Error& e) {
  std::string out(error_code_name(e.code));
  out += '\0' + std::to_string(e.sys_errno) + '\0' + e.message + '\0' + e.hint;
  return out;
}

Error decode(const std::string& bytes) {
  std::vector<std::string> parts;
  size_t at = 0;
  for (int i = 0; i < 3; ++i) {
    size_t end = bytes.find('\0', at);
    if (end == std::string::npos) return make_error(ErrorCode::kInternal, "a malformed error from a child");
    parts.push_back(bytes.substr(at, end - at));
    at = end + 1;
  }
  Error e = make_error(error_code_from_name(parts[0]), parts[2], bytes.substr(at));
  e.sys_errno = std::atoi(parts[1].c_str());
  return e;
}

bool send_all(int fd, const char* data, size_t len) {
  while (len > 0) {
    ssize_t n = retry_eintr([&] { return ::send(fd, data, len, MSG_NOSIGNAL); });
    if (n <= 0) return false;
    data += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

[[noreturn]] void answer(Kind kind, const std::string& bytes, int fd) {
  Header h{kind, static_cast<uint32_t>(bytes.size())};
  bool sent = send_with_fd(channel, &h, sizeof h, fd) == static_cast<ssize_t>(sizeof h) && send_all(channel, bytes.data(), bytes.size());
  ::_exit(sent ? 0 : 1);
}

// A header to the caller, then its one-byte reply: true for 'G'.
bool hear_back(Kind kind, const std::string& bytes = "") {
  Header h{kind, static_cast<uint32_t>(bytes.size())};
  if (!send_all(channel, reinterpret_cast<const char*>(&h), sizeof h) || !send_all(channel, bytes.data(), bytes.size())) return false;
  char go = 0;
  return retry_eintr([&] { return ::read(channel, &go, 1); }) == 1 && go == 'G';
}

// Closes every fd but 0-2 and `keep` (sorted, unique).
void close_all_but(std::vector<int> keep) {
  std::sort(keep.begin(), keep.end());
  keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
  unsigned from = 3;
  for (int fd : keep) {
    if (fd < 3) continue;
    if (static_cast<unsigned>(fd) > from) close_range(from, static_cast<unsigned>(fd) - 1, 0);
    from = static_cast<unsigned>(fd) + 1;
  }
  close_range(from, ~0U, 0);
}

[[noreturn]] void run_child(const ChildCall& call, int sock, pid_t parent) {
  ::prctl(PR_SET_DUMPABLE, 0);  // it holds the caller's memory: nobody attaches to it
  die_with_parent(parent);
  default_signals();
  called_child = true;
  caller_pid = parent;
  channel = sock;
  std::vector<int> keep = call.keep_fds;
  keep.push_back(sock);
  close_all_but(keep);
  if (call.prepare) {
    if (auto ready = call.prepare(); !ready) answer(kFailed, encode(ready.error()), -1);
    if (!hear_back(kPrepared)) ::_exit(1);
  }
  auto done = call.work();
  if (!done) answer(kFailed, encode(done.error()), -1);
  answer(kAnswer, done->bytes, done->fd.get());
}

enum class Read { kDone, kEnded, kLate };

// Reads exactly `len` bytes (the first `got` are there already) before `deadline`.
Read read_exactly(int sock, char* data, size_t len, size_t got, std::chrono::steady_clock::time_point deadline) {
  while (got < len) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    pollfd p{sock, POLLIN, 0};
    if (left <= 0) return Read::kLate;
    int ready = retry_eintr([&] { return ::poll(&p, 1, static_cast<int>(left)); });
    if (ready == 0) return Read::kLate;
    if (ready < 0) return Read::kEnded;
    ssize_t n = retry_eintr([&] { return ::read(sock, data + got, len - got); });
    if (n <= 0) return Read::kEnded;
    got += static_cast<size_t>(n);
  }
  return Read::kDone;
}

}  // namespace

bool in_called_child() { return called_child; }

Result<void> rearm_parent_death() {
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) return fail(sys_error("prctl(PR_SET_PDEATHSIG)"));
  if (::getppid() != caller_pid) return fail(make_error(ErrorCode::kInternal, "the caller is gone"));
  return {};
}

Result<void> ask_caller() {
  if (!called_child) return fail(make_error(ErrorCode::kInternal, "ask_caller outside a called child"));
  if (!hear_back(kAsk)) return fail(make_error(ErrorCode::kInternal, "the caller said stop"));
  return {};
}

Result<ChildAnswer> call_in_child(const ChildCall& call) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return fail(sys_error("socketpair for " + call.what));
  UniqueFd ours(pair[0]), theirs(pair[1]);
  pid_t parent = ::getpid();
  pid_t child = fork_child();
  if (child < 0) return fail(sys_error("fork to " + call.what));
  if (child == 0) {
    ours.reset();
    run_child(call, theirs.get(), parent);
  }
  theirs.reset();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(call.timeout_ms);
  auto reap = [&](bool kill_it) {
    if (kill_it) ::kill(child, SIGKILL);
    int status = 0;
    if (retry_eintr([&] { return ::waitpid(child, &status, __WALL); }) != child) status = 0;
    return status;
  };
  auto lost = [&](Read why) {
    bool late = why == Read::kLate;
    int status = reap(true);
    if (late)
      return fail(make_error(ErrorCode::kTimeout, call.what + ": took more than " + std::to_string(call.timeout_ms / 1000) + " s"));
    return fail(make_error(ErrorCode::kInternal, "the child made to " + call.what + " gave no answer (it " + describe_wait_status(status) + ")"));
  };
  for (;;) {
    Header h{};
    UniqueFd fd;
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    pollfd p{ours.get(), POLLIN, 0};
    int ready = left <= 0 ? 0 : retry_eintr([&] { return ::poll(&p, 1, static_cast<int>(left)); });
    if (ready <= 0) return lost(ready == 0 ? Read::kLate : Read::kEnded);
    ssize_t n = recv_with_fd(ours.get(), &h, sizeof h, fd);
    if (n <= 0) return lost(Read::kEnded);
    if (Read r = read_exactly(ours.get(), reinterpret_cast<char*>(&h), sizeof h, static_cast<size_t>(n), deadline); r != Read::kDone)
      return lost(r);
    if (h.kind == kPrepared || h.kind == kAsk) {
      Result<void> helped = h.kind == kPrepared ? (call.in_parent ? call.in_parent(child) : Result<void>{})
                                                : (call.on_ask ? call.on_ask() : Result<void>{});
      if (!helped) {
        (void)!::send(ours.get(), "S", 1, MSG_NOSIGNAL);
        reap(true);
        return fail(std::move(helped.error()));
      }
      if (::send(ours.get(), "G", 1, MSG_NOSIGNAL) != 1) return lost(Read::kEnded);
      continue;
    }
    if (h.kind != kAnswer && h.kind != kFailed) return lost(Read::kEnded);
    if (h.length > call.max_bytes + 4096) {
      reap(true);
      return fail(make_error(ErrorCode::kLimitExceeded, call.what + ": the answer is larger than " + std::to_string(call.max_bytes >> 20) + " MiB",
                             "ask for less at a time (a smaller page)"));
    }
    std::string bytes(h.length, '\0');
    if (Read r = read_exactly(ours.get(), bytes.data(), bytes.size(), 0, deadline); r != Read::kDone) return lost(r);
    reap(false);
    if (h.kind == kFailed) return fail(decode(bytes));
    return ChildAnswer{std::move(bytes), std::move(fd)};
  }
}

}  // namespace nsbox::sys
