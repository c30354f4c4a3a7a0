#include "kernel/zygote_keeper/kernel_zygote_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "isolation/sys/child_fds.h"
#include "isolation/sys/log.h"
#include "isolation/sys/program.h"
#include "isolation/sys/syscall.h"
#include "runtime/core/command.h"
#include "kernel/zygote_keeper/kernel_zygote_checks.h"
#include "runtime/protocol/unix_socket.h"

namespace nsbox {
namespace {

std::vector<char*> c_strings(std::vector<std::string>& items) {
  std::vector<char*> out;
  for (auto& s : items) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

void end(pid_t pid) {
  ::kill(pid, SIGKILL);
  (void)sys::retry_eintr([&] { return ::waitpid(pid, nullptr, 0); });
}

}  // namespace

Result<void> KernelZygoteProcess::usable() {
  if (::geteuid() != 0)
    return fail(make_error(ErrorCode::kUnsupported, "the kernel zygote needs root: its kernels join their sandboxes as host root "
                                                    "before they drop every privilege"));
  if (!sys::can_signal_process_groups())
    return fail(make_error(ErrorCode::kUnsupported, "the kernel zygote needs pidfd_send_signal to a process group "
                                                    "(PIDFD_SIGNAL_PROCESS_GROUP, Linux 6.9)"));
  return {};
}

Result<std::unique_ptr<KernelZygoteProcess>> KernelZygoteProcess::start(const InstallLayout& layout, const std::string& run_dir,
                                                                        KernelZygoteOptions options) {
  std::string socket_path = run_dir + "/kernel-zygote-" + std::to_string(::getpid()) + ".sock";
  // Made 0600 by the umask at bind: no moment when another user could connect (the
  // callers start it before any thread of theirs, so the umask is nobody else's).
  mode_t umask_before = ::umask(0177);
  auto listened = protocol::listen_unix(socket_path, SOCK_SEQPACKET);
  ::umask(umask_before);
  UniqueFd listening = NSBOX_TRY(std::move(listened));
  UniqueFd stop(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop) {
    ::unlink(socket_path.c_str());
    return fail(sys_error("eventfd"));
  }
  std::unique_ptr<KernelZygoteProcess> z(
      new KernelZygoteProcess(layout, std::move(socket_path), std::move(listening), std::move(stop), std::move(options)));
  std::promise<Result<void>> first;
  auto started = first.get_future();
  z->keeper_ = std::thread(&KernelZygoteProcess::keep, z.get(), std::move(first));
  if (auto ok = started.get(); !ok) return fail(ok.error());  // the destructor joins the keeper
  return z;
}

KernelZygoteProcess::KernelZygoteProcess(const InstallLayout& layout, std::string socket_path, UniqueFd listening, UniqueFd stop,
                                         KernelZygoteOptions options)
    : program_(layout.libexec_dir + "/nsbox-kernel-zygote"),
      sandbox_dir_(layout.sandbox_dir()),
      socket_path_(std::move(socket_path)),
      listening_(std::move(listening)),
      stop_(std::move(stop)),
      options_(std::move(options)) {
  if (options_.restart_delays.empty()) options_.restart_delays.push_back(std::chrono::milliseconds(0));
}

KernelZygoteProcess::~KernelZygoteProcess() {
  uint64_t one = 1;
  (void)::write(stop_.get(), &one, sizeof one);
  if (keeper_.joinable()) keeper_.join();
  ::unlink(socket_path_.c_str());
}

// The keeper thread: the zygote's parent for as long as the server runs (a zygote dies
// with the thread that started it).
void KernelZygoteProcess::keep(std::promise<Result<void>> first) {
  bool first_start = true;
  size_t quick_ends = 0;  // in a row, each within kHealthyLife of its start
  for (;;) {
    auto spawned = spawn();
    if (spawned) {
      int starts_before = starts_.fetch_add(1);  // before the pid: who sees the new pid sees its count
      pid_.store(*spawned);
      if (starts_before > 0) log::info("kernel-zygote: started again (pid " + std::to_string(*spawned) + ")");
    }
    if (first_start) {  // start() returns now: pid() already names the zygote
      first_start = false;
      first.set_value(spawned ? Result<void>{} : Result<void>(fail(spawned.error())));
      if (!spawned) return;
    }
    if (spawned) {
      pid_t pid = *spawned;
      auto started_at = std::chrono::steady_clock::now();
      int status = 0;
      auto ended = wait_for_end(pid, &status);
      pid_.store(0);
      if (ended == End::kStopped) return;
      if (ended == End::kStale) {
        quick_ends = 0;  // not its failure: started again at once
        continue;
      }
      quick_ends = std::chrono::steady_clock::now() - started_at >= kHealthyLife ? 1 : quick_ends + 1;
      if (ended == End::kEnded)  // a wedged one was said as it was found
        log::warn("kernel-zygote: the zygote (pid " + std::to_string(pid) + ") " + sys::describe_wait_status(status) +
                  "; kernels start through init until it serves again");
    } else {
      ++quick_ends;
      log::warn("kernel-zygote: " + spawned.error().message);
    }
    auto delay = options_.restart_delays[std::min(quick_ends, options_.restart_delays.size()) - 1];
    if (refuse_until(std::chrono::steady_clock::now() + delay)) return;
  }
}

Result<pid_t> KernelZygoteProcess::spawn() {
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return fail(sys_error("pipe2"));
  UniqueFd ready_r(ready[0]), ready_w(ready[1]);
  std::vector<std::string> args = {program_, "--listen-fd", "3", "--sandbox-dir", sandbox_dir_, "--ready-fd", "4"};
  std::vector<std::string> env = kernel_zygote_environment();
  // Every symbol bound at the zygote's start, once: bound lazily, each kernel would look
  // up again, in its own copy, every function the zygote had not called yet. The zygote
  // takes it out of its environment before Python reads it.
  env.push_back("LD_BIND_NOW=1");
  auto argv = c_strings(args);
  auto envp = c_strings(env);
  pid_t parent = ::getpid();
  pid_t pid = sys::fork_child();  // only async-signal-safe calls in the child: the server has threads
  if (pid == 0) {
    sys::prepare_child(parent, {-1, STDERR_FILENO, STDERR_FILENO, listening_.get(), ready_w.get()});
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  if (pid < 0) return fail(sys_error("fork the kernel zygote"));
  ready_w.reset();
  // Until it serves, a supervisor asking is told at once (a zygote started again takes
  // its imports' time; the first start comes before any supervisor).
  auto give_up_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(kStartTimeoutMs);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up_at - std::chrono::steady_clock::now()).count();
    pollfd p[3] = {{ready_r.get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}, {listening_.get(), POLLIN, 0}};
    int n = left > 0 ? sys::retry_eintr([&] { return ::poll(p, 3, static_cast<int>(left)); }) : 0;
    if (n > 0 && !p[0].revents && !p[1].revents) {
      refuse_one();
      continue;
    }
    char byte = 0;
    if (n > 0 && p[0].revents && sys::retry_eintr([&] { return ::read(ready_r.get(), &byte, 1); }) == 1 && byte == '1') return pid;
    end(pid);
    if (n > 0 && !p[0].revents) return fail(make_error(ErrorCode::kUnavailable, "the server stopped while the kernel zygote started"));
    if (n < 0) return fail(sys_error("poll for the kernel zygote's start"));
    return fail(make_error(ErrorCode::kInternal, "the kernel zygote (" + program_ + ") " +
                                                     (n > 0 ? std::string("exited before it served")
                                                            : "did not serve within " + std::to_string(kStartTimeoutMs / 1000) + " s") +
                                                     "; its reason is on the server's stderr"));
  }
}

KernelZygoteProcess::End KernelZygoteProcess::wait_for_end(pid_t pid, int* status) {
  using Clock = std::chrono::steady_clock;
  UniqueFd pidfd(sys::pidfd_open(pid, 0));
  UniqueFd ping;             // sent, not answered yet
  bool unanswered = false;   // since ping_sent (a first try refused by a full backlog counts)
  Clock::time_point ping_sent, next_check = Clock::now() + options_.check_every;
  for (;;) {
    auto until = unanswered ? std::min(next_check, ping_sent + options_.wedged_after) : next_check;
    auto wait_ms = std::max<long long>(0, std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count() + 1);
    pollfd p[3] = {{stop_.get(), POLLIN, 0}, {pidfd.get(), POLLIN, 0}, {ping ? ping.get() : -1, POLLIN, 0}};
    int n = sys::retry_eintr([&] { return ::poll(p, 3, static_cast<int>(wait_ms)); });
    if (n > 0 && p[0].revents) {
      end(pid);
      return End::kStopped;
    }
    if (sys::retry_eintr([&] { return ::waitpid(pid, status, WNOHANG); }) == pid) return End::kEnded;
    if (n > 0 && p[2].revents) {  // kPong, or any answer: it serves
      ping.reset();
      unanswered = false;
      ++pings_answered_;
    }
    auto now = Clock::now();
    if (unanswered && now - ping_sent >= options_.wedged_after) {
      log::warn("kernel-zygote: the zygote (pid " + std::to_string(pid) + ") left a ping unanswered for " +
                std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - ping_sent).count()) +
                " ms: it is ended and started again; kernels start through init until one serves");
      end(pid);
      return End::kWedged;
    }
    if (n < 0) ::usleep(100000);  // poll cannot fail on valid fds; never a busy loop
    if (now < next_check) continue;
    next_check = now + options_.check_every;
    if (auto file = kernel_zygote::replaced_file(pid); !file.empty()) {
      log::info("kernel-zygote: " + file + " was replaced since the zygote (pid " + std::to_string(pid) +
                ") started: starting it again");
      end(pid);
      return End::kStale;
    }
    if (!ping) {
      if (auto sent = kernel_zygote::send_ping(socket_path_)) ping = std::move(*sent);
      if (!unanswered) ping_sent = now;
      unanswered = true;
    }
  }
}

bool KernelZygoteProcess::refuse_until(std::chrono::steady_clock::time_point until) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()).count();
    pollfd p[2] = {{stop_.get(), POLLIN, 0}, {listening_.get(), POLLIN, 0}};
    int n = sys::retry_eintr([&] { return ::poll(p, 2, static_cast<int>(std::max<long long>(left, 0))); });
    if (n > 0 && p[0].revents) return true;
    if (n > 0 && p[1].revents) refuse_one();
    if (left <= 0) return false;
  }
}

// A supervisor asking now is told at once (its connection closes: EOF), and starts its
// kernel through init.
void KernelZygoteProcess::refuse_one() {
  UniqueFd refused(::accept4(listening_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  if (!refused && (errno == EMFILE || errno == ENFILE)) ::usleep(10000);  // not a busy loop while full
}

}  // namespace nsbox
