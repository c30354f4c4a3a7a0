#include "tests/support/process.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <strings.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string_view>

extern char** environ;

namespace nsbox::test {
namespace {

std::string_view name_of(std::string_view entry) { return entry.substr(0, entry.find('=')); }

bool proxy_setting(std::string_view name) {
  for (std::string_view proxy : {"http_proxy", "https_proxy", "all_proxy", "no_proxy"})
    if (name.size() == proxy.size() && ::strncasecmp(name.data(), proxy.data(), name.size()) == 0) return true;
  return false;
}

std::vector<std::string> child_environment(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string_view name = name_of(*e);
    bool replaced = std::any_of(extra.begin(), extra.end(), [&](const std::string& x) { return name_of(x) == name; });
    if (!replaced && !proxy_setting(name)) env.emplace_back(*e);
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

}  // namespace

ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options) {
  ProcessResult result;
  // Built before fork: the child only dups, drops privileges and execs.
  std::vector<std::string> environment = child_environment(options.extra_env);
  std::vector<char*> envp;
  for (auto& e : environment) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) || ::pipe2(out, O_CLOEXEC) || ::pipe2(err, O_CLOEXEC)) return result;
  auto start = std::chrono::steady_clock::now();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    // The test process ignores SIGPIPE (it writes to children that may be gone); an
    // ignored signal stays ignored across exec, and the program must get the default.
    ::signal(SIGPIPE, SIG_DFL);
    if (options.stdin_data.empty() && options.stdin_is_null) {
      int null_fd = ::open("/dev/null", O_RDONLY);
      ::dup2(null_fd, 0);
    } else {
      ::dup2(in[0], 0);
    }
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    if (options.as) {
      if (::setgroups(0, nullptr) || ::setresgid(options.as->gid, options.as->gid, options.as->gid) ||
          ::setresuid(options.as->uid, options.as->uid, options.as->uid))
        ::_exit(126);
    }
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  if (!options.stdin_data.empty()) {
    ::signal(SIGPIPE, SIG_IGN);
    (void)!::write(in[1], options.stdin_data.data(), options.stdin_data.size());
  }
  ::close(in[1]);

  auto deadline = start + std::chrono::seconds(options.timeout_s);
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      result.timed_out = true;
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      break;
    }
    if (::poll(fds, 2, static_cast<int>(left)) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
      char buf[65536];
      ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      } else {
        (i == 0 ? result.out : result.err).append(buf, static_cast<size_t>(n));
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) ::close(f.fd);
  int status = 0;
  rusage usage{};
  ::wait4(pid, &status, 0, &usage);
  result.max_rss_bytes = static_cast<uint64_t>(usage.ru_maxrss) * 1024;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace nsbox::test
