#include "isolation/sys/program.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>

#include "isolation/sys/child_fds.h"
#include "isolation/sys/syscall.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox::sys {
namespace {

using Clock = std::chrono::steady_clock;

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

// After its pipes closed (or it was killed) the exit is near; bounded anyway: 2 s, then
// SIGKILL to the group.
void reap(pid_t pid, ProgramRun& run) {
  for (int i = 0; i < 200; ++i) {
    if (::waitpid(pid, &run.status, WNOHANG) == pid) return;
    if (i == 100) ::kill(-pid, SIGKILL);  // it closed its output but will not end
    ::usleep(10000);
  }
  ::kill(-pid, SIGKILL);
  ::waitpid(pid, &run.status, 0);
}

}  // namespace

std::string describe_signal(int signal) {
  const char* name = ::sigabbrev_np(signal);  // null for a number it does not name
  return "signal " + std::to_string(signal) + (name ? std::string(" (SIG") + name + ")" : "");
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "was killed by " + describe_signal(WTERMSIG(status));
  return "ended (wait status " + std::to_string(status) + ")";
}

ProgramRun run_program(const std::vector<std::string>& argv, const std::string& dir, const std::vector<std::string>& env,
                       const std::string& input, double timeout_s, size_t max_out, size_t max_err, int fd3) {
  ProgramRun run;
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    run.err = "pipe2: " + std::string(std::strerror(errno));
    return run;
  }
  UniqueFd in_r(in[0]), in_w(in[1]), out_r(out[0]), out_w(out[1]), err_r(err[0]), err_w(err[1]);
  // Built before fork: the child only calls what is async-signal-safe.
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  pid_t parent = ::getpid();
  pid_t pid = fork_child();
  if (pid < 0) {
    run.err = "fork: " + std::string(std::strerror(errno));
    return run;
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    const int given[] = {in_r.get(), out_w.get(), err_w.get(), fd3};
    prepare_child(parent, std::span<const int>(given, fd3 >= 0 ? 4 : 3));
    if (!dir.empty() && ::chdir(dir.c_str()) != 0) ::_exit(126);
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  in_r.reset();
  out_w.reset();
  err_w.reset();
  for (int fd : {in_w.get(), out_r.get(), err_r.get()}) set_nonblocking(fd);
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  size_t fed = 0;
  if (input.empty()) in_w.reset();
  char buf[65536];
  while (out_r || err_r) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      run.timed_out = true;
      break;
    }
    pollfd fds[3];
    int n = 0;
    if (in_w) fds[n++] = {in_w.get(), POLLOUT, 0};
    if (out_r) fds[n++] = {out_r.get(), POLLIN, 0};
    if (err_r) fds[n++] = {err_r.get(), POLLIN, 0};
    if (retry_eintr([&] { return ::poll(fds, static_cast<nfds_t>(n), static_cast<int>(left)); }) < 0) break;
    for (int i = 0; i < n && !run.out_cut; ++i) {
      if (!fds[i].revents) continue;
      if (in_w && fds[i].fd == in_w.get()) {
        ssize_t w = ::write(in_w.get(), input.data() + fed, input.size() - fed);
        if (w > 0) fed += static_cast<size_t>(w);
        if ((w < 0 && errno != EAGAIN) || fed == input.size()) in_w.reset();  // done, or it closed its stdin
        continue;
      }
      bool is_out = out_r && fds[i].fd == out_r.get();
      UniqueFd& fd = is_out ? out_r : err_r;
      ssize_t got = ::read(fd.get(), buf, sizeof buf);
      if (got == 0 || (got < 0 && errno != EAGAIN)) {
        fd.reset();
        continue;
      }
      if (got < 0) continue;
      if (is_out) {
        if (run.out.size() + static_cast<size_t>(got) > max_out) {
          run.out_cut = true;
          break;
        }
        run.out.append(buf, static_cast<size_t>(got));
      } else {
        // stderr keeps its last bytes: the end of a traceback says most.
        run.err.append(buf, static_cast<size_t>(got));
        if (run.err.size() > max_err) run.err.erase(0, run.err.size() - max_err);
      }
    }
    if (run.out_cut) break;
  }
  if (run.timed_out || run.out_cut) ::kill(-pid, SIGKILL);
  reap(pid, run);
  return run;
}

}  // namespace nsbox::sys
