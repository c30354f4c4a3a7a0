#include "isolation/command_pid1.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "isolation/sys/child_fds.h"
#include "isolation/sys/syscall.h"

namespace nsbox::command_pid1 {
namespace {

void send(int fd, Report::Kind kind, int value) {
  Report r{kind, value};
  (void)sys::retry_eintr([&] { return ::write(fd, &r, sizeof r); });
}

std::vector<char*> c_strings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

[[noreturn]] void exec_command(const Command& c, int errno_fd) {
  ::setsid();
  int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  int stdio[3] = {c.stdin_fd, c.stdout_fd, c.stderr_fd};
  for (int target = 0; target < 3; ++target) ::dup2(stdio[target] >= 0 ? stdio[target] : null_fd, target);
  // A fresh signal state: the caller may ignore SIGPIPE or SIGINT; the command must not.
  sys::default_signals();
  int err = 0;
  if (::chdir(c.cwd.c_str()) == 0) {
    auto argv = c_strings(c.argv);
    auto envp = c_strings(c.env);
    ::execvpe(argv[0], argv.data(), envp.data());
  }
  err = errno;
  (void)!::write(errno_fd, &err, sizeof err);
  ::_exit(err == ENOENT ? 127 : 126);
}

// This process is a copy of its caller: its argv and environment (an embedding program's
// API keys, say) are in memory, and /proc/1/cmdline shows argv to the sandbox. Overwrite
// both ranges, whose bounds /proc/self/stat gives (fields 48-51).
void wipe_inherited_strings() {
  char buf[1024];
  int fd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return;
  buf[n] = 0;
  const char* p = std::strrchr(buf, ')');  // the command name may contain spaces
  if (!p) return;
  unsigned long field[52] = {};
  int index = 2;  // the next field after ") " is field 3
  for (char* tok = ::strtok(const_cast<char*>(p + 1), " "); tok && index < 51; tok = ::strtok(nullptr, " "))
    field[++index] = std::strtoul(tok, nullptr, 10);
  for (int start : {48, 50}) {
    unsigned long from = field[start], to = field[start + 1];
    if (from && to > from && to - from < (16ul << 20)) std::memset(reinterpret_cast<void*>(from), 0, to - from);
  }
}

}  // namespace

void run(const Command& command, int report_fd) {
  wipe_inherited_strings();
  // Non-dumpable: the sandbox's code (same uid) cannot read this process's memory, a copy
  // of the caller's, through /proc/1/mem or /proc/1/environ.
  ::prctl(PR_SET_DUMPABLE, 0);
  ::prctl(PR_SET_NAME, "nsbox-run");
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    send(report_fd, Report::kExecFailed, errno);
    ::_exit(1);
  }
  pid_t pid = ::fork();
  if (pid == 0) exec_command(command, pipe_fds[1]);
  ::close(pipe_fds[1]);
  for (int fd : {command.stdin_fd, command.stdout_fd, command.stderr_fd})
    if (fd >= 0) ::close(fd);
  if (pid < 0) {
    send(report_fd, Report::kExecFailed, errno);
    ::_exit(1);
  }
  int err = 0;
  if (sys::retry_eintr([&] { return ::read(pipe_fds[0], &err, sizeof err); }) == sizeof err) {
    send(report_fd, Report::kExecFailed, err);
    ::_exit(1);
  }
  send(report_fd, Report::kStarted, pid);
  for (;;) {
    int status = 0;
    pid_t reaped = ::waitpid(-1, &status, 0);
    if (reaped == pid) {
      send(report_fd, Report::kExited, status);
      ::_exit(0);
    }
    if (reaped < 0 && errno != EINTR) ::_exit(1);
  }
}

}  // namespace nsbox::command_pid1
