#include "isolation/namespace_child.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "isolation/sys/child_fds.h"
#include "isolation/sys/fd_passing.h"
#include "isolation/sys/spawn.h"
#include "isolation/sys/syscall.h"

namespace nsbox::namespace_child {

Result<std::vector<UniqueFd>> open_namespaces(pid_t sandbox_pid, std::initializer_list<const char*> namespaces) {
  std::string proc = "/proc/" + std::to_string(sandbox_pid) + "/ns/";
  std::vector<UniqueFd> opened;
  for (const char* ns : namespaces) {
    opened.emplace_back(::open((proc + ns).c_str(), O_RDONLY | O_CLOEXEC));
    if (!opened.back()) return fail(sys_error("open " + proc + ns));
  }
  return opened;
}

Result<UniqueFd> make_fd(pid_t sandbox_pid, std::initializer_list<const char*> namespaces,
                         std::span<const char* const> steps, const Body& body, const std::string& what) {
  auto namespace_fds = open_namespaces(sandbox_pid, namespaces);
  if (!namespace_fds) return fail(std::move(namespace_fds.error()).context(what));
  std::vector<UniqueFd> opened = std::move(*namespace_fds);
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) return fail(sys_error("socketpair").context(what));
  UniqueFd ours(pair[0]), theirs(pair[1]);
  std::vector<int> child_fds;  // the namespaces as fds 0.., the socket after them
  for (auto& fd : opened) child_fds.push_back(fd.get());
  child_fds.push_back(theirs.get());
  const int socket_fd = static_cast<int>(opened.size());

  pid_t pid = ::fork();
  if (pid == 0) {
    if (!sys::arrange_child_fds(std::span<const int>(child_fds))) ::_exit(127);
    Report r;
    int fd = body(r);
    if (fd >= 0) r.step = -1;
    else r.err = errno;
    (void)sys::send_with_fd(socket_fd, &r, sizeof r, fd);
    ::_exit(fd >= 0 ? 0 : 1);
  }
  theirs.reset();
  if (pid < 0) return fail(sys_error("fork").context(what));
  Report r{-2, 0};
  UniqueFd made;
  ssize_t n = sys::retry_eintr([&] { return sys::recv_with_fd(ours.get(), &r, sizeof r, made); });
  (void)sys::retry_eintr([&] { return ::waitpid(pid, nullptr, 0); });
  if (n == sizeof r && r.step == -1 && made) return made;
  if (n == sizeof r && r.step >= 0 && static_cast<size_t>(r.step) < steps.size())
    return fail(sys_error(steps[static_cast<size_t>(r.step)], r.err).context(what));
  return fail(make_error(ErrorCode::kSystem, what + ": the helper failed"));
}

namespace {

// What a child sharing our memory runs, and what it says back. `body` returns 0 (or, for
// make_fd_sharing_memory, the descriptor), or -1 with errno set.
struct Shared {
  const SharedBody* body;
  std::span<const int> ns;
  Report report{-1, 0};  // step -1: the body never started
  int result = -1;
  bool done = false;
};

// Not instrumented: it runs on a stack AddressSanitizer does not know.
__attribute__((no_sanitize_address)) int run_shared(void* arg) {
  auto* s = static_cast<Shared*>(arg);
  s->report.step = 0;
  s->result = (*s->body)(s->report, s->ns);
  if (s->result < 0) {
    s->report.err = errno;
    return 1;
  }
  s->done = true;
  return 0;
}

// Runs `shared` in a child sharing our memory (and `extra_flags`' more); a failure names
// the step the child was at.
Result<void> run_shared_child(Shared& shared, int extra_flags, std::span<const char* const> steps, const std::string& what) {
  alignas(16) char stack[16 * 1024];
  if (sys::vfork_call(run_shared, &shared, stack, extra_flags) < 0) return fail(sys_error("clone", errno).context(what));
  if (shared.done) return {};
  const Report& r = shared.report;
  if (r.step >= 0 && static_cast<size_t>(r.step) < steps.size() && r.err != 0)
    return fail(make_error(ErrorCode::kSystem, what + ": " + steps[static_cast<size_t>(r.step)] + ": " + std::strerror(r.err)));
  return fail(make_error(ErrorCode::kSystem, what + ": the helper failed"));
}

}  // namespace

Result<void> run_sharing_memory(pid_t sandbox_pid, std::initializer_list<const char*> namespaces,
                                std::span<const char* const> steps, const SharedBody& body, const std::string& what) {
  auto opened = open_namespaces(sandbox_pid, namespaces);
  if (!opened) return fail(std::move(opened.error()).context(what));
  std::vector<int> ns;
  for (const auto& fd : *opened) ns.push_back(fd.get());
  Shared shared{&body, ns};
  return run_shared_child(shared, 0, steps, what);
}

Result<UniqueFd> make_fd_sharing_memory(std::span<const int> ns, std::span<const char* const> steps,
                                        const SharedBody& body, const std::string& what) {
  Shared shared{&body, ns};
  NSBOX_CHECK(run_shared_child(shared, CLONE_FILES, steps, what));
  return UniqueFd(shared.result);
}

}  // namespace nsbox::namespace_child
