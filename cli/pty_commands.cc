// pty: programmatic PTY sessions (docs/semantics.md, "PTY sessions").
//
//   nsbox pty ID start [--cols N --rows N] -- CMD...    -> the session id
//   nsbox pty ID write SID CHARS [--yield-ms N]        -> what it printed in the window
//   nsbox pty ID read SID [--yield-ms N]
//   nsbox pty ID resize SID --cols N --rows N
//   nsbox pty ID kill SID|--all
#include <cstdlib>

#include "cli/context.h"

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

// Raw output to stdout; with --json the answer as a document. Exit status 0.
int print_output(Output& out, const PtyOutput& o) {
  if (out.json) {
    out.document(o.to_json());
    return 0;
  }
  write_output(1, o.output);  // the terminal's bytes, as `nsbox sh` relays a command's
  return 0;
}

}  // namespace

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
    return o ? print_output(ctx->out, *o) : ctx->out.error(o.error());
  }
  if (verb == "read" && pos.size() == 3) {
    auto o = ctx->runtime->pty_read(sandbox, *sid, *yield);
    return o ? print_output(ctx->out, *o) : ctx->out.error(o.error());
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
