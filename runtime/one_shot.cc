// Runtime::run: `nsbox run`, a sandbox for a single command, with no supervisor daemon:
// this process plays the supervisor for the command's life, then removes everything.
// The sandbox's pid 1 runs the command itself (isolation/command_pid1.h).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <random>

#include "isolation/sys/files.h"
#include "isolation/sys/syscall.h"
#include "runtime/runtime.h"
#include "runtime/sandbox_instance.h"

namespace nsbox {
namespace {

using Clock = std::chrono::steady_clock;
using command_pid1::Report;

constexpr int kKillGraceMs = 5000;

std::string one_shot_id() {
  static constexpr char kAlphabet[] = "0123456789abcdefghijklmnopqrstuvwxyz";
  std::random_device rd;
  std::string id = "run-";
  for (int i = 0; i < 6; ++i) id += kAlphabet[rd() % 36];
  return id;
}

struct CapturePipes {
  UniqueFd out_r, out_w, err_r, err_w;
};

Result<CapturePipes> make_capture_pipes() {
  CapturePipes p;
  int a[2], b[2];
  if (::pipe2(a, O_CLOEXEC) != 0 || ::pipe2(b, O_CLOEXEC) != 0) return fail(sys_error("pipe2"));
  p.out_r.reset(a[0]);
  p.out_w.reset(a[1]);
  p.err_r.reset(b[0]);
  p.err_w.reset(b[1]);
  ::fcntl(p.out_r.get(), F_SETFL, O_NONBLOCK);
  ::fcntl(p.err_r.get(), F_SETFL, O_NONBLOCK);
  return p;
}

// Reads what is there now; closes the pipe at EOF.
void relay(UniqueFd& pipe, bool is_stdout, const OutputCallback& cb) {
  char buf[65536];
  while (pipe) {
    ssize_t n = ::read(pipe.get(), buf, sizeof buf);
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) return pipe.reset();
    cb(is_stdout, std::string_view(buf, static_cast<size_t>(n)));
  }
}

// Applies one report of pid 1 to `end`; true when the command is over.
bool apply_report(const Report& r, CommandEnd& end) {
  switch (r.kind) {
    case Report::kStarted: return false;
    case Report::kExecFailed: end.spawn_errno = r.value; return true;
    case Report::kExited:
      if (WIFEXITED(r.value)) end.exit_code = WEXITSTATUS(r.value);
      if (WIFSIGNALED(r.value)) end.signal = WTERMSIG(r.value);
      return true;
  }
  return false;
}

}  // namespace

Result<CommandResult> Runtime::run(const RunOptions& o) const {
  if (o.command.argv.empty()) return fail(make_error(ErrorCode::kInvalidArgument, "no command to run"));
  NSBOX_CHECK(files::ensure_private_dir(store_.root().run_dir));
  NSBOX_CHECK(files::ensure_private_dir(store_.root().cache_dir()));
  std::optional<CapturePipes> pipes;
  if (o.on_output) pipes = NSBOX_TRY(make_capture_pipes());

  command_pid1::Command command;
  command.argv = o.command.argv;
  command.env = command_environment(o.env, o.command.env);
  command.cwd = o.command.cwd;
  command.stdin_fd = o.stdin_fd;
  command.stdout_fd = pipes ? pipes->out_w.get() : o.stdout_fd;
  command.stderr_fd = pipes ? pipes->err_w.get() : o.stderr_fd;
  // /mnt/files is a tmpfs: a one-shot sandbox keeps nothing, so it costs no disk work.
  InstanceOptions options{one_shot_id(), o.size, o.net, /*files_dir=*/"", layout_.sandbox_dir(),
                          store_.root().cache_dir(), command};
  const auto started = Clock::now();
  auto instance = NSBOX_TRY(SandboxInstance::start(options));
  const uint64_t oom_before = instance->oom_kills();
  if (pipes) {
    pipes->out_w.reset();
    pipes->err_w.reset();
  }

  CommandEnd end;
  bool ended = false;
  auto deadline = started + std::chrono::milliseconds(static_cast<int64_t>(o.command.timeout_s * 1000));
  while (!ended) {
    auto now = Clock::now();
    if (now >= deadline) {
      if (end.timed_out) break;  // pid 1 did not go within the grace period
      // Killing pid 1 takes everything in the sandbox with it.
      end.timed_out = true;
      ::syscall(SYS_pidfd_send_signal, instance->pidfd(), SIGKILL, nullptr, 0);
      deadline = now + std::chrono::milliseconds(kKillGraceMs);
      continue;
    }
    int wait_ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count()) + 1;
    pollfd p[4] = {{instance->reports_fd(), POLLIN, 0}, {instance->seccomp_listener_fd(), POLLIN, 0},
                   {pipes && pipes->out_r ? pipes->out_r.get() : -1, POLLIN, 0},
                   {pipes && pipes->err_r ? pipes->err_r.get() : -1, POLLIN, 0}};
    if (sys::retry_eintr([&] { return ::poll(p, 4, wait_ms); }) < 0) return fail(sys_error("poll"));
    if (p[1].revents & POLLIN)
      if (auto v = instance->take_seccomp_violation())
        end.seccomp_kills.push_back(v->syscall + " (pid " + std::to_string(v->sandbox_pid) + " in the sandbox)");
    if (pipes && (p[2].revents | p[3].revents)) {
      relay(pipes->out_r, true, o.on_output);
      relay(pipes->err_r, false, o.on_output);
    }
    if (p[0].revents & (POLLIN | POLLHUP)) {
      Report r{};
      ssize_t n = sys::retry_eintr([&] { return ::read(instance->reports_fd(), &r, sizeof r); });
      if (n == sizeof r) {
        ended = apply_report(r, end);
      } else if (end.timed_out) {
        end.signal = SIGKILL;  // killed at the deadline: pid 1 could not report
        ended = true;
      } else {
        return fail(make_error(ErrorCode::kSandboxDead, "the sandbox's pid 1 exited without a report"));
      }
    }
  }
  if (pipes) {
    relay(pipes->out_r, true, o.on_output);
    relay(pipes->err_r, false, o.on_output);
  }
  end.oom_killed = instance->oom_kills() > oom_before;
  CommandResult result = classify(end, o.command.argv.front(), instance->limits(), size_tier_name(o.size), o.command.timeout_s);
  result.duration_ms = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count());
  NSBOX_CHECK(instance->destroy());
  return result;
}

}  // namespace nsbox
