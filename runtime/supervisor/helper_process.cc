#include "runtime/supervisor/helper_process.h"

#include <linux/capability.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "isolation/sys/child_fds.h"
#include "isolation/sys/files.h"
#include "isolation/sys/log.h"
#include "isolation/sys/program.h"
#include "isolation/sys/secret.h"
#include "isolation/sys/syscall.h"
#include "mounts/bucket/external_helpers.h"

extern char** environ;

namespace nsbox {
namespace {

// In the child (raw system calls only): each of `caps` made inheritable, then ambient.
bool keep_ambient(const std::vector<int>& caps) {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  for (int cap : caps) data[cap >> 5].inheritable |= 1u << (cap & 31);
  if (::syscall(SYS_capset, &header, data) != 0) return false;
  for (int cap : caps)
    if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) != 0) return false;
  return true;
}

}  // namespace

std::vector<std::string> helper_environment(std::vector<std::string> extra) {
  std::vector<std::string> env = bucket::proxy_settings(environ);
  env.push_back("PATH=/usr/sbin:/usr/bin:/sbin:/bin");
  for (auto& e : extra) env.push_back(std::move(e));
  return env;
}

Result<HelperProcess> HelperProcess::start(const HelperLaunch& launch) {
  if (launch.fds.size() > 8) return fail(make_error(ErrorCode::kInternal, launch.what + ": more than 8 fds for a helper"));
  // Built before fork: the child only calls what is async-signal-safe.
  std::vector<char*> argv, envp;
  for (const auto& a : launch.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : launch.environment) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  pid_t parent = ::getpid();
  pid_t pid = sys::fork_child();
  if (pid < 0) return fail(sys_error("fork " + launch.program).context(launch.what));
  if (pid == 0) {
    for (const auto& [fd, type] : launch.join)
      if (::setns(fd, type) != 0) ::_exit(126);
    if (!launch.ambient.empty() && !keep_ambient(launch.ambient)) ::_exit(126);
    sys::prepare_child(parent, std::span<const int>(launch.fds.data(), launch.fds.size()));
    ::execve(launch.program.c_str(), argv.data(), envp.data());
    ::_exit(127);
  }
  HelperProcess helper;
  helper.pid_ = pid;
  helper.pidfd_.reset(sys::pidfd_open(pid, 0));
  helper.what_ = launch.what;
  return helper;
}

HelperProcess& HelperProcess::operator=(HelperProcess&& other) noexcept {
  if (this == &other) return *this;
  stop(0);
  pid_ = std::exchange(other.pid_, 0);
  pidfd_ = std::move(other.pidfd_);
  what_ = std::move(other.what_);
  return *this;
}

std::string HelperProcess::reap() {
  int status = 0;
  if (pid_ <= 0 || ::waitpid(pid_, &status, WNOHANG) != pid_) return "";
  pid_ = 0;  // never signalled again: its pid may be someone else's now (the pidfd stays
             // open until the object goes: an event loop may still be watching it)
  return sys::describe_wait_status(status);
}

bool HelperProcess::reaped_within(int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    if (pid_ <= 0) return true;
    pid_t got = ::waitpid(pid_, nullptr, WNOHANG);
    if (got == pid_ || (got < 0 && errno == ECHILD)) {
      pid_ = 0;
      return true;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return false;
    // A pidfd is readable once its process has exited; without one (pidfd_open failed),
    // look again every 20 ms.
    pollfd p{pidfd_.get(), POLLIN, 0};
    int wait_ms = static_cast<int>(pidfd_ ? left : std::min<int64_t>(left, 20));
    (void)sys::retry_eintr([&] { return ::poll(&p, pidfd_ ? 1 : 0, wait_ms); });
  }
}

void HelperProcess::stop(int grace_ms) { stop_all({this}, grace_ms, 1000); }

void HelperProcess::stop_all(const std::vector<HelperProcess*>& helpers, int grace_ms, int kill_ms) {
  auto signal_all = [&](int sig) {
    for (HelperProcess* h : helpers)
      if (h->pid_ > 0) ::kill(h->pid_, sig);  // not reaped yet, so the pid is still this helper's
  };
  // Each waits on its own pidfd in turn; the bound is shared, so a hung one costs it once.
  auto reap_all_within = [&](int timeout_ms) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    bool all = true;
    for (HelperProcess* h : helpers) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
      all = h->reaped_within(static_cast<int>(std::max<int64_t>(left, 0))) && all;
    }
    return all;
  };
  if (grace_ms > 0) {
    signal_all(SIGTERM);
    if (reap_all_within(grace_ms)) return;
  }
  signal_all(SIGKILL);
  if (reap_all_within(kill_ms)) return;
  for (HelperProcess* h : helpers)
    if (h->pid_ > 0)
      log::error(h->what_ + " (pid " + std::to_string(h->pid_) + ") survived SIGKILL for " + std::to_string(kill_ms) +
                 " ms; left unreaped");
}

Result<void> send_config(UniqueFd fd, std::string& text, const std::string& what) {
  struct sigaction ignore{}, previous{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &previous);
  auto written = files::write_all(fd.get(), text, what + "'s stdin");
  ::sigaction(SIGPIPE, &previous, nullptr);
  sys::wipe(text);
  return written;
}

Result<std::string> read_report(int fd, int timeout_ms, const std::string& what) {
  std::string line;
  char buf[4096];
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (line.find('\n') == std::string::npos && line.size() < 64 * 1024) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    int n = left <= 0 ? 0 : sys::retry_eintr([&] { return ::poll(&p, 1, static_cast<int>(left)); });
    if (n == 0)
      return fail(make_error(ErrorCode::kTimeout, what + ": not ready within " + std::to_string(timeout_ms / 1000) + " s"));
    ssize_t got = sys::retry_eintr([&] { return ::read(fd, buf, sizeof buf); });
    if (got <= 0) break;
    line.append(buf, static_cast<size_t>(got));
  }
  return line;
}

}  // namespace nsbox
