#include "runtime/client/supervisor_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string_view>
#include <vector>

#include "isolation/sys/files.h"
#include "isolation/sys/spawn.h"
#include "isolation/sys/syscall.h"
#include "mounts/bucket/external_helpers.h"

namespace nsbox {
namespace {

// What the supervisor and its children read from their environment: PATH (mkfs.ext4,
// the mount tools), NSBOX_* (NSBOX_LIBEXEC), the locale and time zone of messages, the
// proxy settings of the bucket mounts' servers. HOME is for tools that look for it.
bool kept_for_supervisor(std::string_view entry) {
  for (std::string_view name : {"PATH=", "HOME=", "LANG=", "TZ="})
    if (entry.starts_with(name)) return true;
  return entry.starts_with("LC_") || entry.starts_with("NSBOX_") || bucket::is_proxy_setting(entry);
}

// The caller's environment as the supervisor gets it (K=V).
std::vector<std::string> supervisor_environment(char** environment) {
  std::vector<std::string> kept;
  for (char** e = environment; e && *e; ++e)
    if (kept_for_supervisor(*e)) kept.emplace_back(*e);
  return kept;
}

Result<std::string> read_line_bounded(int fd, int timeout_ms) {
  std::string line;
  char buf[4096];
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    int n = left <= 0 ? 0 : sys::retry_eintr([&] { return ::poll(&p, 1, static_cast<int>(left)); });
    if (n == 0) return fail(make_error(ErrorCode::kTimeout, "the supervisor did not report within " + std::to_string(timeout_ms / 1000) + " s"));
    ssize_t got = sys::retry_eintr([&] { return ::read(fd, buf, sizeof buf); });
    if (got < 0) return fail(sys_error("read from the supervisor"));
    if (got == 0) return line;
    line.append(buf, static_cast<size_t>(got));
    if (line.find('\n') != std::string::npos) return line;
  }
}

}  // namespace

Result<protocol::Json> spawn_supervisor(const std::string& supervisor_path, const StateRoot& root,
                                        const protocol::Json& spec, int timeout_ms) {
  // Built before the clone: the children only make async-signal-safe calls.
  std::vector<std::string> args = {"nsbox-supervisor", "--run-dir", root.run_dir, "--data-dir", root.data_dir};
  std::vector<std::string> env = supervisor_environment(environ);
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  int in_pipe[2], out_pipe[2];
  if (::pipe2(in_pipe, O_CLOEXEC) != 0) return fail(sys_error("pipe2"));
  UniqueFd in_r(in_pipe[0]), in_w(in_pipe[1]);
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return fail(sys_error("pipe2"));
  UniqueFd out_r(out_pipe[0]), out_w(out_pipe[1]);

  // A daemon (its own session, adopted by init/subreaper), with stderr to /dev/null and
  // nothing else of ours held open: a test harness's pipe would never see EOF.
  const int fds[] = {in_r.get(), out_w.get(), -1};
  if (sys::spawn_daemon(supervisor_path.c_str(), argv.data(), envp.data(), fds) != 0)
    return fail(sys_error("clone to start the supervisor " + supervisor_path));
  in_r.reset();
  out_w.reset();

  // A supervisor that died at once must not take the caller down with SIGPIPE; the
  // caller's own disposition comes back afterwards (library code changes no globals).
  struct sigaction ignore{}, previous{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &previous);
  auto written = files::write_all(in_w.get(), spec.dump(), "the supervisor's stdin");
  ::sigaction(SIGPIPE, &previous, nullptr);
  in_w.reset();
  auto line = NSBOX_TRY(read_line_bounded(out_r.get(), timeout_ms));
  if (line.empty()) {
    if (!written) return fail(std::move(written.error()));
    // It died before it had a sandbox directory (and a log) or took it down with it.
    return fail(make_error(ErrorCode::kInternal, "the supervisor (" + supervisor_path + ") exited without a report",
                           "`nsbox doctor` checks this host; the kernel log (dmesg) may say what killed it"));
  }
  auto j = protocol::Json::parse(line, nullptr, false);
  if (j.is_discarded()) return fail(make_error(ErrorCode::kProtocol, "the supervisor's report is not JSON"));
  return j;
}

}  // namespace nsbox
