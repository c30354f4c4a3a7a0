#include "isolation/sys/forked_call.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "isolation/sys/child_fds.h"
#include "isolation/sys/fd_passing.h"
#include "isolation/sys/program.h"
#include "isolation/sys/syscall.h"

namespace nsbox::sys {
namespace {

bool called_child = false;

// A message of the child's: its kind, the length of what follows, and maybe an fd.
enum Kind : char { kPrepared = 'P', kAnswer = 'A', kFailed = 'E' };
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

bool write_all_to(int fd, const char* data, size_t len) {
  while (len > 0) {
    ssize_t n = retry_eintr([&] { return ::send(fd, data, len, MSG_NOSIGNAL); });
    if (n <= 0) return false;
    data += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

[[noreturn]] void answer(int sock, Kind kind, const std::string& bytes, int fd) {
  Header h{kind, static_cast<uint32_t>(bytes.size())};
  bool sent = send_with_fd(sock, &h, sizeof h, fd) == static_cast<ssize_t>(sizeof h) && write_all_to(sock, bytes.data(), bytes.size());
  ::_exit(sent ? 0 : 1);
}

[[noreturn]] void run_child(const ChildCall& call, int sock, pid_t parent) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);
  default_signals();
  called_child = true;
  if (call.prepare) {
    if (auto ready = call.prepare(); !ready) answer(sock, kFailed, encode(ready.error()), -1);
    Header h{kPrepared, 0};
    if (::send(sock, &h, sizeof h, MSG_NOSIGNAL) != sizeof h) ::_exit(1);
    char go = 0;
    if (retry_eintr([&] { return ::read(sock, &go, 1); }) != 1 || go != 'G') ::_exit(1);
  }
  auto done = call.work();
  if (!done) answer(sock, kFailed, encode(done.error()), -1);
  answer(sock, kAnswer, done->bytes, done->fd.get());
}

// Reads exactly `len` bytes (the first `got` are there already) within `timeout_ms` (-1:
// no bound beyond the child's own life: it ends when the work does).
bool read_exactly(int sock, char* data, size_t len, size_t got, int timeout_ms) {
  while (got < len) {
    pollfd p{sock, POLLIN, 0};
    if (retry_eintr([&] { return ::poll(&p, 1, timeout_ms); }) <= 0) return false;
    ssize_t n = retry_eintr([&] { return ::read(sock, data + got, len - got); });
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

bool in_called_child() { return called_child; }

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
  auto reap = [&](bool kill_it) {
    if (kill_it) ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, __WALL);
    return status;
  };
  auto lost = [&](bool kill_it) {
    int status = reap(kill_it);
    return fail(make_error(ErrorCode::kInternal, "the child made to " + call.what + " gave no answer (it " +
                                                     describe_wait_status(status) + ")"));
  };
  // Its first message: prepared (if it had a step), its answer, or its failure.
  constexpr int kHandshakeMs = 10'000;
  Header h{};
  UniqueFd fd;
  auto next_header = [&](int timeout_ms) {
    pollfd p{ours.get(), POLLIN, 0};
    if (retry_eintr([&] { return ::poll(&p, 1, timeout_ms); }) <= 0) return false;
    ssize_t n = recv_with_fd(ours.get(), &h, sizeof h, fd);
    return n > 0 && read_exactly(ours.get(), reinterpret_cast<char*>(&h), sizeof h, static_cast<size_t>(n), timeout_ms);
  };
  if (call.prepare) {
    if (!next_header(kHandshakeMs)) return lost(true);
    if (h.kind == kPrepared) {
      Result<void> helped = call.in_parent ? call.in_parent(child) : Result<void>{};
      if (!helped) {
        reap(true);
        return fail(std::move(helped.error()));
      }
      if (::send(ours.get(), "G", 1, MSG_NOSIGNAL) != 1) return lost(true);
      h = {};
    }
  }
  if (h.kind == 0 && !next_header(-1)) return lost(true);
  if ((h.kind != kAnswer && h.kind != kFailed) || h.length > call.max_bytes + 4096) return lost(true);
  std::string bytes(h.length, '\0');
  if (!read_exactly(ours.get(), bytes.data(), bytes.size(), 0, -1)) return lost(true);
  reap(false);
  if (h.kind == kFailed) return fail(decode(bytes));
  return ChildAnswer{std::move(bytes), std::move(fd)};
}

}  // namespace nsbox::sys
