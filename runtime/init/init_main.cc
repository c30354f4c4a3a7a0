// nsbox-init: pid 1 of every sandbox. It spawns commands when the supervisor asks, reaps
// every process (orphans included), reports exits, and never runs user code itself.
//
// It talks to the supervisor over fd 3 (frames, runtime/protocol/frame.h). When that
// socket closes, the supervisor is gone and init exits, which takes the whole pid
// namespace with it. Runs as the sandbox user, with no capabilities, under seccomp; it
// marks itself non-dumpable so that sandboxed code of the same uid cannot read or write
// its memory through /proc/1/mem. In a sandbox with accounts of its own it runs as
// kSystemUid (999), an id no command has (so none can lower its limits: prlimit compares
// ids), and holds CAP_SETUID, CAP_SETGID and CAP_KILL of the sandbox's user namespace:
// they arrive as ambient capabilities across its exec, which it clears first thing (so
// none passes on), and every spawn names who the command runs as; each child drops them
// all before its exec.
//
//   nsbox-init            (exec'ed by the sandbox's set-up child, as pid 1)
//   fd 3:   the control socket to the supervisor: spawn and signal requests in, started
//           and exited reports out; fds for a command's stdio arrive with its request
//   stdin, stdout, stderr: /dev/null
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "isolation/sys/child_fds.h"
#include "isolation/sys/syscall.h"
#include "runtime/protocol/frame.h"

namespace nsbox::init {
namespace {

using protocol::Json;

constexpr int kControlFd = 3;

struct Spawned {
  uint64_t id;
  int exec_report = -1;  // read end of the close-on-exec pipe until exec is settled
  bool exec_failed = false;  // reported as spawn_failed; its exit is not reported
};
std::map<pid_t, Spawned> g_children;

void send(const Json& message) {
  // A failed send means the supervisor is gone; the next read sees EOF and we exit.
  (void)protocol::send_frame(kControlFd, message);
}

std::vector<char*> c_strings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// Who the command runs as, when the request names it ("identity": name, uid, gid,
// groups); then no capability, in any set, is left to pass an exec.
bool become(const Json& req) {
  if (auto who = req.find("identity"); who != req.end() && who->is_object()) {
    auto groups = who->value("groups", std::vector<gid_t>{});
    auto gid = who->value("gid", gid_t{0}), uid = who->value("uid", uid_t{0});
    if (gid == 0 || uid == 0) {
      errno = EINVAL;
      return false;
    }
    if (::setgroups(groups.size(), groups.data()) != 0 || ::setresgid(gid, gid, gid) != 0 || ::setresuid(uid, uid, uid) != 0)
      return false;
  }
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct none[_LINUX_CAPABILITY_U32S_3]{};
  return ::syscall(SYS_capset, &header, none) == 0;
}

// The child side of a spawn: a session of its own (its own process group, killable as
// one; no controlling terminal unless `tty`: then its stdin, a terminal, becomes it), the
// given stdio, default signal state, then exec.
[[noreturn]] void exec_child(const Json& req, const std::vector<int>& stdio, int report_fd) {
  ::setsid();
  for (int target = 0; target < static_cast<int>(stdio.size()); ++target) {
    int fd = stdio[target];
    if (fd < 0 && target > 2) continue;  // fd 3 only when one was given
    if (fd < 0) fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (fd < 0 || ::dup2(fd, target) < 0) {
      int err = errno;
      (void)!::write(report_fd, &err, sizeof err);
      ::_exit(127);
    }
  }
  if (req.value("tty", false) && ::ioctl(0, TIOCSCTTY, 0) != 0) {
    int err = errno;
    (void)!::write(report_fd, &err, sizeof err);
    ::_exit(127);
  }
  sys::default_signals();
  if (!become(req)) {
    int err = errno;
    (void)!::write(report_fd, &err, sizeof err);
    ::_exit(126);
  }
  auto argv_s = req.value("argv", std::vector<std::string>{});
  auto env_s = req.value("env", std::vector<std::string>{});
  std::string cwd = req.value("cwd", std::string("/home/user"));
  if (::chdir(cwd.c_str()) != 0) {
    int err = errno;
    (void)!::write(report_fd, &err, sizeof err);
    ::_exit(127);
  }
  auto argv = c_strings(argv_s);
  auto envp = c_strings(env_s);
  ::execvpe(argv[0], argv.data(), envp.data());
  int err = errno;
  (void)!::write(report_fd, &err, sizeof err);
  ::_exit(err == ENOENT ? 127 : 126);
}

void spawn(const Json& req, std::vector<UniqueFd>& fds) {
  uint64_t id = req.value("id", uint64_t{0});
  auto names = req.value("fds", std::vector<std::string>{});
  std::vector<int> stdio = {-1, -1, -1, -1};  // 0-2, and 3 for the kernel's control socket
  for (size_t i = 0; i < names.size() && i < fds.size(); ++i) {
    if (names[i] == "stdin") stdio[0] = fds[i].get();
    if (names[i] == "stdout") stdio[1] = fds[i].get();
    if (names[i] == "stderr") stdio[2] = fds[i].get();
    if (names[i] == "fd3") stdio[3] = fds[i].get();
  }
  if (req.value("argv", Json::array()).empty()) {
    send({{"event", "spawn_failed"}, {"id", id}, {"errno", EINVAL}, {"message", "empty command"}});
    return;
  }
  // A close-on-exec pipe tells exec success (EOF) from failure (the errno arrives).
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    send({{"event", "spawn_failed"}, {"id", id}, {"errno", errno}, {"message", "pipe2"}});
    return;
  }
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(report[0]);
    exec_child(req, stdio, report[1]);
  }
  ::close(report[1]);
  fds.clear();  // our copies of the stdio ends: the command's exit must reach EOF
  if (pid < 0) {
    int err = errno;
    ::close(report[0]);
    send({{"event", "spawn_failed"}, {"id", id}, {"errno", err}, {"message", "fork"}});
    return;
  }
  // Whether exec worked is read in the main loop, not here: code in the sandbox could stop
  // the child before its exec (kill -STOP -1) and would wedge a blocking read.
  g_children[pid] = {id, report[0]};
}

// The child's exec pipe has news: EOF (exec done) or an errno. When exec failed, the
// spawn_failed report stands for the whole command and its exit is not reported.
void settle_exec(pid_t pid, Spawned& child) {
  int err = 0;
  ssize_t n = sys::retry_eintr([&] { return ::read(child.exec_report, &err, sizeof err); });
  ::close(child.exec_report);
  child.exec_report = -1;
  if (n == sizeof err) {
    child.exec_failed = true;
    send({{"event", "spawn_failed"}, {"id", child.id}, {"errno", err}, {"message", std::strerror(err)}});
    return;
  }
  send({{"event", "started"}, {"id", child.id}, {"pid", pid}});
}

void signal_command(const Json& req) {
  uint64_t id = req.value("id", uint64_t{0});
  int sig = req.value("signal", SIGKILL);
  bool group = req.value("group", true);
  for (const auto& [pid, child] : g_children)
    if (child.id == id) {
      if (group) ::kill(-pid, sig);  // the whole process group
      ::kill(pid, sig);              // and the process, in case it left its group
    }
}

void reap() {
  for (;;) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    auto it = g_children.find(pid);
    if (it == g_children.end()) continue;  // an orphan that was reparented to us
    uint64_t id = it->second.id;
    if (it->second.exec_report >= 0) settle_exec(pid, it->second);  // its pipe is final now
    bool failed = it->second.exec_failed;
    g_children.erase(it);
    if (failed) continue;
    Json exited = {{"event", "exited"}, {"id", id}, {"pid", pid}};
    if (WIFEXITED(status)) exited["exit_code"] = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) {
      exited["signal"] = WTERMSIG(status);
      exited["core_dumped"] = WCOREDUMP(status) != 0;
    }
    send(exited);
  }
}

int run() {
  ::prctl(PR_SET_DUMPABLE, 0);
  // Ambient capabilities brought init its own across its exec; none may reach a child's.
  // Fail closed: an init that cannot clear them does not run.
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) return 1;
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);
  UniqueFd sigfd(::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!sigfd) return 1;
  ::fcntl(kControlFd, F_SETFD, FD_CLOEXEC);
  send({{"event", "ready"}, {"pid", ::getpid()}});

  for (;;) {
    std::vector<pollfd> p = {{kControlFd, POLLIN, 0}, {sigfd.get(), POLLIN, 0}};
    std::vector<pid_t> settling;
    for (const auto& [pid, child] : g_children)
      if (child.exec_report >= 0) {
        p.push_back({child.exec_report, POLLIN, 0});
        settling.push_back(pid);
      }
    if (::poll(p.data(), p.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    for (size_t i = 0; i < settling.size(); ++i)
      if (p[2 + i].revents) {
        auto it = g_children.find(settling[i]);
        if (it != g_children.end() && it->second.exec_report >= 0) settle_exec(it->first, it->second);
      }
    if (p[1].revents & POLLIN) {
      signalfd_siginfo info;
      while (::read(sigfd.get(), &info, sizeof info) == sizeof info) {}
      reap();
    }
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      auto frame = protocol::recv_frame(kControlFd, protocol::kMaxInitFrame);
      if (!frame || !*frame) return 0;  // the supervisor is gone: so is the sandbox
      const Json& msg = (*frame)->message;
      std::string op = msg.value("op", std::string());
      if (op == "spawn") {
        spawn(msg, (*frame)->fds);
      } else if (op == "signal") {
        signal_command(msg);
      } else if (op == "ping") {
        send({{"event", "pong"}});
      }
    }
  }
}

}  // namespace
}  // namespace nsbox::init

int main() { return nsbox::init::run(); }
