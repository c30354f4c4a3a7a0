#include "runtime/supervisor_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "isolation/sys/files.h"
#include "isolation/sys/syscall.h"

namespace nsbox {
namespace {

// A sandbox starts in milliseconds; a bucket mount's server may take up to a minute to
// give up on a remote that does not answer (bucket_servers.cc), and the report waits for it.
constexpr int kStartTimeoutMs = 90000;

[[noreturn]] void exec_supervisor(const std::string& path, const StateRoot& root, int in_fd, int out_fd) {
  ::setsid();
  if (::fork() != 0) ::_exit(0);  // the grandchild is adopted by init/subreaper
  ::dup2(in_fd, STDIN_FILENO);
  ::dup2(out_fd, STDOUT_FILENO);
  int null_fd = ::open("/dev/null", O_WRONLY);
  if (null_fd >= 0) ::dup2(null_fd, STDERR_FILENO);
  // Whatever the caller inherited (a test harness's pipes) must not be held open by a
  // daemon: its reader would never see EOF.
  sys::close_range(3, ~0U, 0);
  ::signal(SIGPIPE, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execl(path.c_str(), "nsbox-supervisor", "--run-dir", root.run_dir.c_str(), "--data-dir", root.data_dir.c_str(),
          static_cast<char*>(nullptr));
  ::_exit(127);
}

Result<std::string> read_line_bounded(int fd) {
  std::string line;
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    int n = sys::retry_eintr([&] { return ::poll(&p, 1, kStartTimeoutMs); });
    if (n == 0) return fail(make_error(ErrorCode::kTimeout, "the supervisor did not report within " + std::to_string(kStartTimeoutMs / 1000) + " s"));
    ssize_t got = sys::retry_eintr([&] { return ::read(fd, buf, sizeof buf); });
    if (got < 0) return fail(sys_error("read from the supervisor"));
    if (got == 0) return line;
    line.append(buf, static_cast<size_t>(got));
    if (line.find('\n') != std::string::npos) return line;
  }
}

}  // namespace

Result<protocol::Json> spawn_supervisor(const std::string& supervisor_path, const StateRoot& root,
                                        const protocol::Json& spec) {
  int in_pipe[2], out_pipe[2];
  if (::pipe2(in_pipe, O_CLOEXEC) != 0) return fail(sys_error("pipe2"));
  UniqueFd in_r(in_pipe[0]), in_w(in_pipe[1]);
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return fail(sys_error("pipe2"));
  UniqueFd out_r(out_pipe[0]), out_w(out_pipe[1]);

  pid_t child = ::fork();
  if (child < 0) return fail(sys_error("fork the supervisor"));
  if (child == 0) exec_supervisor(supervisor_path, root, in_r.get(), out_w.get());
  in_r.reset();
  out_w.reset();
  ::waitpid(child, nullptr, 0);  // the intermediate exits at once

  // A supervisor that died at once must not take the caller down with SIGPIPE; the
  // caller's own disposition comes back afterwards (library code changes no globals).
  struct sigaction ignore{}, previous{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &previous);
  auto written = files::write_all(in_w.get(), spec.dump(), "the supervisor's stdin");
  ::sigaction(SIGPIPE, &previous, nullptr);
  in_w.reset();
  auto line = NSBOX_TRY(read_line_bounded(out_r.get()));
  if (line.empty()) {
    if (!written) return fail(std::move(written.error()));
    return fail(make_error(ErrorCode::kInternal, "the supervisor exited without a report",
                           "see " + root.run_dir + "/sandboxes/*/supervisor.log"));
  }
  auto j = protocol::Json::parse(line, nullptr, false);
  if (j.is_discarded()) return fail(make_error(ErrorCode::kProtocol, "the supervisor's report is not JSON"));
  return j;
}

}  // namespace nsbox
