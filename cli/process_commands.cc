// Processes that outlive the command that started them (docs/semantics.md, "Processes"):
//
//   nsbox spawn ID [--cwd DIR] [--env K=V] [--as USER] [--tty] -- CMD...   -> its pid
//   nsbox ps ID                                                 -> pid, status, exit code, command
//   nsbox logs ID PID [--follow] [--offset N] [--stderr-offset N]
//   nsbox kill ID PID [SIGNAL]     with SIGNAL: sends it; without: kills and removes it
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <tuple>

#include "cli/context.h"
#include "runtime/core/signal_names.h"

namespace nsbox::cli {
namespace {

using protocol::Json;

Result<int64_t> pid_arg(const std::string& text) {
  char* end = nullptr;
  long long pid = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || pid <= 0)
    return fail(make_error(ErrorCode::kInvalidArgument, "'" + text + "' is not a pid", "see `nsbox ps ID`"));
  return static_cast<int64_t>(pid);
}

Result<uint64_t> offset_flag(const ParsedArgs& args, const std::string& flag) {
  if (!args.values.count(flag)) return uint64_t{0};
  std::string text = args.value(flag);
  char* end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || text[0] == '-')
    return fail(make_error(ErrorCode::kInvalidArgument, "--" + flag + " must be a byte offset, not '" + text + "'"));
  return static_cast<uint64_t>(v);
}

int spawn(CommandContext& ctx, const std::string& sandbox) {
  if (ctx.args.command.empty()) return ctx.out.error(make_error(ErrorCode::kInvalidArgument, "nsbox spawn ID needs -- CMD"));
  ProcessStart start;
  start.argv = ctx.args.command;
  // One argument with a space: a bash command line, as `nsbox sh` takes it.
  if (start.argv.size() == 1 && start.argv[0].find(' ') != std::string::npos) start.argv = {"/bin/bash", "-c", start.argv[0]};
  auto env = env_flags(ctx.args);
  if (!env) return ctx.out.error(env.error());
  start.env = std::move(*env);
  if (ctx.args.values.count("cwd")) start.cwd = ctx.args.value("cwd");
  if (ctx.args.values.count("as")) start.run_as = ctx.args.value("as");
  start.tty = ctx.args.has("tty");
  auto pid = ctx.runtime->process_start(sandbox, start);
  if (!pid) return ctx.out.error(pid.error());
  if (ctx.out.json) ctx.out.document({{"pid", *pid}});
  else ctx.out.line(std::to_string(*pid));
  return 0;
}

int ps(CommandContext& ctx, const std::string& sandbox) {
  auto all = ctx.runtime->processes(sandbox);
  if (!all) return ctx.out.error(all.error());
  if (ctx.out.json) {
    ctx.out.document({{"processes", *all}});
    return 0;
  }
  ctx.out.line("PID     STATUS    EXIT  COMMAND");
  for (const auto& p : *all) {
    std::string command;
    for (const auto& a : p.value("argv", Json::array())) command += (command.empty() ? "" : " ") + a.get<std::string>();
    std::string exit = p["exit_code"].is_null() ? "-" : std::to_string(p["exit_code"].get<int>());
    char line[96];
    std::snprintf(line, sizeof line, "%-7lld %-9s %-5s ", static_cast<long long>(p.value("pid", 0)),
                  p.value("status", "").c_str(), exit.c_str());
    ctx.out.line(line + command.substr(0, 200));
  }
  return 0;
}

// The bytes as they are (a process's output is its own business, as `nsbox sh` relays it);
// with --follow, until it ended and all was shown. Exit status 0, or the process's own
// once it ended and --follow waited for it.
int logs(CommandContext& ctx, const std::string& sandbox, int64_t pid) {
  ProcessRead read;
  auto offset = offset_flag(ctx.args, "offset"), stderr_offset = offset_flag(ctx.args, "stderr-offset");
  if (!offset || !stderr_offset) return ctx.out.error(!offset ? offset.error() : stderr_offset.error());
  read.offset = *offset;
  read.stderr_offset = *stderr_offset;
  const bool follow = ctx.args.has("follow");
  for (;;) {
    auto r = ctx.runtime->process_read(sandbox, pid, read);
    if (!r) return ctx.out.error(r.error());
    bool got = false;
    for (auto [stream, next, fd] : {std::tuple{"stdout", &read.offset, STDOUT_FILENO}, std::tuple{"stderr", &read.stderr_offset, STDERR_FILENO}}) {
      if (!r->contains(stream)) continue;
      const Json& chunk = (*r)[stream];
      std::string bytes = protocol::get_bytes(chunk);
      *next = chunk.value("offset", *next) + bytes.size();
      got = got || !bytes.empty();
      if (!ctx.out.json && !bytes.empty()) (void)!::write(fd, bytes.data(), bytes.size());
    }
    bool ended = r->value("status", "") == "exited";
    if (!follow || (ended && !got)) {
      if (ctx.out.json) {
        Json end = *r;
        end["offset"] = read.offset;
        end["stderr_offset"] = read.stderr_offset;
        end.erase("stdout");
        end.erase("stderr");
        ctx.out.document(end);
      }
      return follow && ended ? r->value("exit_code", 0) : 0;
    }
    read.wait_ms = got ? 0 : 1000;
  }
}

int kill(CommandContext& ctx, const std::string& sandbox, int64_t pid, const std::vector<std::string>& pos) {
  if (pos.size() == 3) {
    auto signal = parse_signal(std::string_view(pos[2]));
    if (!signal) return ctx.out.error(signal.error());
    auto r = ctx.runtime->process_signal(sandbox, pid, *signal);
    if (!r) return ctx.out.error(r.error());
    if (ctx.out.json) ctx.out.document(*r);
    return 0;
  }
  auto r = ctx.runtime->process_remove(sandbox, pid);
  if (!r) return ctx.out.error(r.error());
  if (ctx.out.json) ctx.out.document({{"removed", pid}});
  return 0;
}

}  // namespace

int cmd_spawn(const Invocation& inv) {
  int code = 0;
  auto ctx = prepare(inv, code);
  if (!ctx) return code;
  if (ctx->args.positionals.size() != 1)
    return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "nsbox spawn takes a sandbox, then -- CMD"));
  return spawn(*ctx, ctx->args.positionals[0]);
}

int cmd_ps(const Invocation& inv) {
  int code = 0;
  auto ctx = prepare(inv, code);
  if (!ctx) return code;
  if (ctx->args.positionals.size() != 1) return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "nsbox ps takes a sandbox"));
  return ps(*ctx, ctx->args.positionals[0]);
}

int cmd_logs(const Invocation& inv) {
  int code = 0;
  auto ctx = prepare(inv, code);
  if (!ctx) return code;
  const auto& pos = ctx->args.positionals;
  if (pos.size() != 2) return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "nsbox logs takes a sandbox and a pid"));
  auto pid = pid_arg(pos[1]);
  return pid ? logs(*ctx, pos[0], *pid) : ctx->out.error(pid.error());
}

int cmd_kill(const Invocation& inv) {
  int code = 0;
  auto ctx = prepare(inv, code);
  if (!ctx) return code;
  const auto& pos = ctx->args.positionals;
  if (pos.size() < 2 || pos.size() > 3)
    return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "nsbox kill takes a sandbox, a pid and perhaps a signal"));
  auto pid = pid_arg(pos[1]);
  return pid ? kill(*ctx, pos[0], *pid, pos) : ctx->out.error(pid.error());
}

}  // namespace nsbox::cli
