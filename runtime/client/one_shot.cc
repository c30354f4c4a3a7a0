// Runtime::run: `nsbox run`, a sandbox for a single command, with no supervisor daemon:
// this process plays the supervisor for the command's life, then removes everything.
// The sandbox's pid 1 runs the command itself (isolation/command_pid1.h).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <random>

#include "isolation/sys/files.h"
#include "isolation/sys/syscall.h"
#include "runtime/client/runtime.h"
#include "runtime/core/sandbox_instance.h"
#include "runtime/client/stdin_pump.h"

namespace nsbox {
namespace {

using Clock = std::chrono::steady_clock;
using command_pid1::Report;

constexpr int kKillGraceMs = 5000;

// "run-<our pid>-<random>": the pid lets a later run remove what a killed one left.
std::string one_shot_id() {
  static constexpr char kAlphabet[] = "0123456789abcdefghijklmnopqrstuvwxyz";
  std::random_device rd;
  std::string id = "run-" + std::to_string(::getpid()) + "-";
  for (int i = 0; i < 4; ++i) id += kAlphabet[rd() % 36];
  return id;
}

struct Pipe {
  UniqueFd read_end, write_end;
};

Result<Pipe> output_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return fail(sys_error("pipe2"));
  ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

// SIGINT, SIGTERM and SIGHUP arrive on a signalfd while the sandbox exists, so that an
// interrupted `nsbox run` still removes it; the caller's mask comes back afterwards.
class InterruptSignals {
 public:
  InterruptSignals() {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, sig);
    ::pthread_sigmask(SIG_BLOCK, &set, &old_);
    fd_.reset(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  }
  ~InterruptSignals() { ::pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  int fd() const { return fd_.get(); }
  int take() {
    signalfd_siginfo info{};
    return ::read(fd_.get(), &info, sizeof info) == sizeof info ? static_cast<int>(info.ssi_signo) : 0;
  }

 private:
  sigset_t old_;
  UniqueFd fd_;
};

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
  // Those modes have a helper of the supervisor's (the proxy, the NAT), which a one-shot
  // run has not: it would get a network namespace with no way out and no error.
  if (o.net == network::Mode::kAllow || o.net == network::Mode::kInternet)
    return fail(make_error(ErrorCode::kUnsupported,
                           "a one-shot run has no egress proxy or NAT helper: --net " +
                               std::string(network::mode_name(o.net)) + " needs a sandbox",
                           "nsbox create --net ..., then nsbox sh ID -- CMD"));
  NSBOX_CHECK(files::ensure_private_dir(store_.root().run_dir));
  NSBOX_CHECK(files::ensure_private_dir(store_.root().cache_dir()));

  // The sandbox gets pipes only, never our fds (docs/design.md, "The one-shot `nsbox run`": a terminal or a file
  // handed over could be read or reopened for writing).
  // A reader of our output that has gone (EPIPE: SIGPIPE is ignored here, as callers that
  // ignore it pass on) ends the run as a signal would: otherwise the command would run on,
  // relayed into a closed pipe.
  bool reader_gone = false;
  OutputCallback sink = o.on_output ? o.on_output : [&o, &reader_gone](bool is_stdout, std::string_view bytes) {
    if (reader_gone) return;
    auto written = files::write_all(is_stdout ? o.stdout_fd : o.stderr_fd, bytes, "output");
    if (!written && written.error().sys_errno == EPIPE) reader_gone = true;
  };
  Pipe out = NSBOX_TRY(output_pipe()), err = NSBOX_TRY(output_pipe());
  std::optional<StdinPump> pump;
  if (o.stdin_fd >= 0) pump = NSBOX_TRY(StdinPump::open(o.stdin_fd));

  command_pid1::Command command;
  command.argv = o.command.argv;
  command.env = command_environment(o.env, o.command.env);
  if (!o.command.cwd.empty()) command.cwd = o.command.cwd;
  command.stdin_fd = pump ? pump->sandbox_end() : -1;
  command.stdout_fd = out.write_end.get();
  command.stderr_fd = err.write_end.get();
  // /mnt/files is a tmpfs: a one-shot sandbox keeps nothing, so it costs no disk work.
  InstanceOptions options{one_shot_id(), o.size, o.net, /*files_dir=*/"", false, {}, layout_.sandbox_dir(),
                          store_.root().cache_dir(), /*bridge_dir=*/"", /*wheelhouse=*/"", command, /*home_dir=*/"",
                          // The cgroups of runs killed before they removed theirs: swept while
                          // the sandbox's own set-up runs, off the path to the command.
                          /*while_building=*/[] { cgroup::remove_orphans("run-"); }};
  InterruptSignals interrupts;
  const auto started = Clock::now();
  auto instance = NSBOX_TRY(SandboxInstance::start(options));
  out.write_end.reset();
  err.write_end.reset();
  if (pump) pump->release_sandbox_end();

  CommandEnd end;
  int interrupted_by = 0;
  bool killed_for_it = false;
  bool ended = false;
  auto deadline = started + std::chrono::milliseconds(static_cast<int64_t>(o.command.timeout_s * 1000));
  auto kill_sandbox = [&] { ::syscall(SYS_pidfd_send_signal, instance->pidfd(), SIGKILL, nullptr, 0); };
  while (!ended) {
    auto now = Clock::now();
    if (now >= deadline) {
      if (end.timed_out || interrupted_by) break;  // pid 1 did not go within the grace period
      end.timed_out = true;  // killing pid 1 takes everything in the sandbox with it
      kill_sandbox();
      deadline = now + std::chrono::milliseconds(kKillGraceMs);
      continue;
    }
    int wait_ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count()) + 1;
    pollfd p[7] = {{instance->reports_fd(), POLLIN, 0}, {instance->seccomp_listener_fd(), POLLIN, 0},
                   {out.read_end ? out.read_end.get() : -1, POLLIN, 0}, {err.read_end ? err.read_end.get() : -1, POLLIN, 0},
                   {interrupts.fd(), POLLIN, 0}, pump ? pump->source_poll() : pollfd{-1, 0, 0},
                   pump ? pump->sink_poll() : pollfd{-1, 0, 0}};
    if (sys::retry_eintr([&] { return ::poll(p, 7, wait_ms); }) < 0) return fail(sys_error("poll"));
    if (p[1].revents & POLLIN)
      if (auto v = instance->take_seccomp_violation())
        end.seccomp_kills.push_back(v->syscall + " (pid " + std::to_string(v->sandbox_pid) + " in the sandbox)");
    if (p[2].revents | p[3].revents) {
      relay(out.read_end, true, sink);
      relay(err.read_end, false, sink);
    }
    if (pump) pump->pump(p[5].revents, p[6].revents);
    if ((p[4].revents & POLLIN) && !interrupted_by) interrupted_by = interrupts.take();
    if (reader_gone && !interrupted_by) interrupted_by = SIGPIPE;
    if (interrupted_by && !killed_for_it) {
      killed_for_it = true;
      kill_sandbox();
      deadline = Clock::now() + std::chrono::milliseconds(kKillGraceMs);
    }
    if (p[0].revents & (POLLIN | POLLHUP)) {
      Report r{};
      ssize_t n = sys::retry_eintr([&] { return ::read(instance->reports_fd(), &r, sizeof r); });
      if (n == sizeof r) {
        ended = apply_report(r, end);
      } else if (end.timed_out || interrupted_by) {
        end.signal = SIGKILL;  // we killed pid 1: it could not report
        ended = true;
      } else {
        return fail(make_error(ErrorCode::kSandboxDead, "the sandbox's pid 1 exited without a report"));
      }
    }
  }
  if (pump) pump->stop();
  relay(out.read_end, true, sink);
  relay(err.read_end, false, sink);
  // Its cgroup is new (one_shot_id: our pid and a random tag): any OOM kill in it is this
  // command's, so no count was read before it ran.
  end.oom_killed = instance->oom_kills() > 0;
  CommandResult result = classify(end, o.command.argv.front(), instance->limits(), size_tier_name(o.size), o.command.timeout_s);
  if (interrupted_by) {
    result.status = "killed";
    result.reason = "interrupted";
    result.exit_code = 128 + interrupted_by;
    result.message = std::string("interrupted by SIG") + (sigabbrev_np(interrupted_by) ? sigabbrev_np(interrupted_by) : "?") +
                     "; the sandbox was removed";
  }
  result.duration_ms = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count());
  NSBOX_CHECK(instance->destroy());
  return result;
}

}  // namespace nsbox
