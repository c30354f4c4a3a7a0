// pty: programmatic PTY sessions (docs/semantics.md, "PTY sessions").
//
//   nsbox pty ID start [--cols N --rows N] -- CMD...    -> the session id
//   nsbox pty ID write SID CHARS [--yield-ms N]        -> what it printed in the window
//   nsbox pty ID read SID [--yield-ms N]
//   nsbox pty ID resize SID --cols N --rows N
//   nsbox pty ID kill SID|--all
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <termios.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <optional>
#include <thread>

#include "cli/context.h"
#include "isolation/sys/syscall.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox::cli {
namespace {

Result<uint64_t> number_arg(const std::string& text, const std::string& what) {
  char* end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0') return fail(make_error(ErrorCode::kInvalidArgument, what + " must be a number, not '" + text + "'"));
  return static_cast<uint64_t>(v);
}

Result<uint64_t> flag_number(const ParsedArgs& args, const std::string& flag, uint64_t fallback) {
  if (!args.values.count(flag)) return fallback;
  return number_arg(args.value(flag), "--" + flag);
}

// The output to stdout (made safe on a terminal, unless --raw); with --json the answer
// as a document. Exit status 0.
int print_output(Output& out, const PtyOutput& o, bool raw) {
  if (out.json) {
    out.document(o.to_json());
    return 0;
  }
  TerminalText(STDOUT_FILENO, raw).write(o.output);  // the terminal's bytes, as `nsbox sh` relays a command's
  return 0;
}

// Our terminal in raw mode while it lives (when stdin is one): keys go to the sandbox's
// terminal as typed, Ctrl-C included.
class RawMode {
 public:
  RawMode() {
    if (!::isatty(0) || ::tcgetattr(0, &saved_) != 0) return;
    termios raw = saved_;
    ::cfmakeraw(&raw);
    active_ = ::tcsetattr(0, TCSANOW, &raw) == 0;
  }
  ~RawMode() {
    if (active_) ::tcsetattr(0, TCSANOW, &saved_);
  }
  RawMode(const RawMode&) = delete;
  RawMode& operator=(const RawMode&) = delete;

 private:
  termios saved_{};
  bool active_ = false;
};

}  // namespace

int sh_on_tty(CommandContext& ctx, const std::string& sandbox, const CommandRequest& command) {
  const Runtime& rt = *ctx.runtime;
  PtyStart start;
  start.argv = command.argv;
  start.env = command.env;
  start.run_as = command.run_as;
  // SIGWINCH: the window changed. SIGHUP, SIGTERM: we are told to go; the session goes
  // with us and the terminal is given back as it was. Blocked before the size is read:
  // a resize between the reading and the session's start waits for the loop below
  // (SIGWINCH's default is to be discarded).
  sigset_t mask;
  sigemptyset(&mask);
  for (int sig : {SIGWINCH, SIGHUP, SIGTERM}) sigaddset(&mask, sig);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);
  UniqueFd sigfd(::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!sigfd) return ctx.out.error(sys_error("signalfd"));
  winsize w{};
  if (::ioctl(1, TIOCGWINSZ, &w) == 0 && w.ws_col && w.ws_row) {
    start.cols = w.ws_col;
    start.rows = w.ws_row;
  }
  auto sid = rt.pty_start(sandbox, start);
  if (!sid) return ctx.out.error(sid.error());
  int wake[2];
  if (::pipe2(wake, O_CLOEXEC) != 0) return ctx.out.error(sys_error("pipe2"));
  UniqueFd wake_r(wake[0]), wake_w(wake[1]);

  std::mutex mutex;  // exit_code and failure, set by either thread
  std::optional<int> exit_code;
  std::optional<Error> failure;
  RawMode raw;
  // The screen: long polls that answer as soon as there is output, until the exit.
  std::thread screen([&] {
    for (;;) {
      auto o = rt.pty_read(sandbox, *sid, 10000, /*early=*/true);
      std::lock_guard lock(mutex);
      if (!o) {
        if (!failure) failure = std::move(o.error());
        break;
      }
      write_output(1, o->output);
      if (o->exit_code) {
        exit_code = o->exit_code;
        break;
      }
    }
    (void)!::write(wake_w.get(), "x", 1);
  });
  // The keyboard, and the window's size.
  bool stdin_open = true;
  bool stop = false;
  char buf[4096];
  while (!stop) {
    pollfd p[3] = {{stdin_open ? 0 : -1, POLLIN, 0}, {sigfd.get(), POLLIN, 0}, {wake_r.get(), POLLIN, 0}};
    if (sys::retry_eintr([&] { return ::poll(p, 3, -1); }) < 0) {
      std::lock_guard lock(mutex);
      failure = sys_error("poll");
      break;
    }
    if (p[2].revents) break;
    if (p[1].revents) {
      signalfd_siginfo info;
      bool resized = false;
      while (::read(sigfd.get(), &info, sizeof info) == sizeof info) {
        if (info.ssi_signo == SIGWINCH) resized = true;
        else stop = true;
      }
      if (stop) {
        std::lock_guard lock(mutex);
        failure = make_error(ErrorCode::kUnavailable, "stopped by a signal; the PTY session was killed");
        break;
      }
      if (resized && ::ioctl(1, TIOCGWINSZ, &w) == 0 && w.ws_col && w.ws_row) (void)rt.pty_resize(sandbox, *sid, w.ws_col, w.ws_row);
    }
    if (p[0].revents) {
      ssize_t n = ::read(0, buf, sizeof buf);
      if (n <= 0) {
        stdin_open = false;  // the command goes on; its own EOF is Ctrl-D typed on a terminal
        continue;
      }
      if (auto typed = rt.pty_type(sandbox, *sid, std::string(buf, static_cast<size_t>(n))); !typed) {
        std::lock_guard lock(mutex);
        if (!exit_code && !failure) failure = std::move(typed.error());
        if (failure) break;
      }
    }
  }
  bool failed;
  {
    std::lock_guard lock(mutex);
    failed = failure.has_value();
  }
  if (failed) (void)rt.pty_kill(sandbox, *sid);  // the screen's long poll ends with it
  screen.join();
  std::lock_guard lock(mutex);
  if (failure && !exit_code) return ctx.out.error(*failure);
  return exit_code.value_or(kExitOwnFailure);
}

int cmd_pty(const Invocation& inv) {
  int code = 0;
  auto ctx = prepare(inv, code);
  if (!ctx) return code;
  const auto& pos = ctx->args.positionals;
  if (pos.size() < 2)
    return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "nsbox pty takes a sandbox, then start, write, read, resize or kill",
                                     "see `nsbox pty --help`"));
  const std::string& sandbox = pos[0];
  const std::string& verb = pos[1];
  auto cols = flag_number(ctx->args, "cols", 80);
  auto rows = flag_number(ctx->args, "rows", 24);
  auto yield = flag_number(ctx->args, "yield-ms", 250);
  for (auto* r : {&cols, &rows, &yield})
    if (!*r) return ctx->out.error(r->error());
  if (verb == "start" && pos.size() == 2) {
    if (ctx->args.command.empty()) return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "nsbox pty ID start needs -- CMD"));
    PtyStart start;
    start.argv = ctx->args.command;
    // One argument with a space: a bash command line, as `nsbox sh` takes it.
    if (start.argv.size() == 1 && start.argv[0].find(' ') != std::string::npos) start.argv = {"/bin/bash", "-c", start.argv[0]};
    start.cols = static_cast<unsigned>(*cols);
    start.rows = static_cast<unsigned>(*rows);
    auto sid = ctx->runtime->pty_start(sandbox, start);
    if (!sid) return ctx->out.error(sid.error());
    if (ctx->out.json) ctx->out.document({{"session_id", *sid}});
    else ctx->out.line(std::to_string(*sid));
    return 0;
  }
  if (pos.size() < 3 && !(verb == "kill" && ctx->args.has("all")))
    return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "nsbox pty ID " + verb + " needs a session id"));
  auto sid = verb == "kill" && ctx->args.has("all") ? Result<uint64_t>(0) : number_arg(pos[2], "the session id");
  if (!sid) return ctx->out.error(sid.error());
  if (verb == "write" && pos.size() == 4) {
    auto o = ctx->runtime->pty_write(sandbox, *sid, pos[3], *yield);
    return o ? print_output(ctx->out, *o, ctx->args.has("raw")) : ctx->out.error(o.error());
  }
  if (verb == "read" && pos.size() == 3) {
    auto o = ctx->runtime->pty_read(sandbox, *sid, *yield);
    return o ? print_output(ctx->out, *o, ctx->args.has("raw")) : ctx->out.error(o.error());
  }
  if (verb == "resize" && pos.size() == 3) {
    auto r = ctx->runtime->pty_resize(sandbox, *sid, static_cast<unsigned>(*cols), static_cast<unsigned>(*rows));
    return r ? 0 : ctx->out.error(r.error());
  }
  if (verb == "kill" && pos.size() <= 3) {
    auto killed = ctx->runtime->pty_kill(sandbox, *sid);
    if (!killed) return ctx->out.error(killed.error());
    if (ctx->out.json) ctx->out.document({{"killed", *killed}});
    else
      for (uint64_t k : *killed) ctx->out.line(std::to_string(k));
    return 0;
  }
  return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "nsbox pty: unknown use of '" + verb + "'", "see `nsbox pty --help`"));
}

}  // namespace nsbox::cli
