// sh (a command in a running sandbox) and run (one-shot).
#include <unistd.h>

#include "cli/context.h"
#include "isolation/sys/files.h"

namespace nsbox::cli {
namespace {

// One argument is a command line for bash (the agent "bash tool"); several are a program
// and its arguments, run as given.
std::vector<std::string> to_argv(const std::vector<std::string>& command) {
  if (command.size() == 1) return {"/bin/bash", "-c", command.front()};
  return command;
}

// stdin reaches the command only when it is a pipe or a file: a terminal would let the
// sandbox read the user's keystrokes, and would leave an unattended command waiting.
int stdin_for_command() { return ::isatty(STDIN_FILENO) ? -1 : STDIN_FILENO; }

// --json keeps the first kCaptureLimit bytes of each stream in memory and counts the
// rest: a command printing gigabytes must not take the CLI's memory with it.
constexpr size_t kCaptureLimit = 1u << 20;

struct Captured {
  std::string out, err;
  uint64_t out_bytes = 0, err_bytes = 0;
};

// The output as it comes, to our stdout and stderr (made safe where they are terminals).
struct Streamed {
  TerminalText out, err;
  explicit Streamed(bool raw) : out(STDOUT_FILENO, raw), err(STDERR_FILENO, raw) {}
  OutputCallback sink() {
    return [this](bool is_stdout, std::string_view bytes) { (is_stdout ? out : err).write(bytes); };
  }
};

OutputCallback capture_into(Captured& c) {
  return [&c](bool is_stdout, std::string_view bytes) {
    std::string& kept = is_stdout ? c.out : c.err;
    (is_stdout ? c.out_bytes : c.err_bytes) += bytes.size();
    if (kept.size() < kCaptureLimit) kept.append(bytes.substr(0, kCaptureLimit - kept.size()));
  };
}

// "stdout": text, or "stdout_b64" when the bytes are not UTF-8; with sizes and truncation.
void put_stream(nlohmann::json& j, const std::string& name, const std::string& kept, uint64_t total) {
  protocol::Json bytes;
  protocol::put_bytes(bytes, kept);
  if (bytes.contains("data")) j[name] = bytes["data"];
  else j[name + "_b64"] = bytes["data_b64"];
  j[name + "_bytes"] = total;
  j[name + "_truncated"] = total > kept.size();
}

int finish(const Output& out, const Result<CommandResult>& result, const Captured& captured) {
  if (!result) return out.error(result.error());
  if (out.json) {
    nlohmann::json j = result->to_json();
    if (!j.contains("stdout_bytes")) {  // a one-shot: what we captured ourselves
      put_stream(j, "stdout", captured.out, captured.out_bytes);
      put_stream(j, "stderr", captured.err, captured.err_bytes);
    }
    out.document(j);
  } else if (!result->message.empty()) {
    out.note(result->message);
  }
  return result->exit_code;
}

Result<CommandRequest> command_request(const ParsedArgs& args, bool via_shell) {
  if (!args.has_command || args.command.empty())
    return fail(make_error(ErrorCode::kInvalidArgument, "no command given", "put the command after --, e.g. -- ls -la"));
  CommandRequest req;
  req.argv = via_shell ? to_argv(args.command) : args.command;
  req.env = NSBOX_TRY(env_flags(args));
  req.timeout_s = NSBOX_TRY(timeout_flag(args));
  if (args.values.count("as")) req.run_as = args.value("as");
  return req;
}

}  // namespace

int cmd_sh(const Invocation& inv) {
  int code = 0;
  auto ctx = prepare(inv, code);
  if (!ctx) return code;
  if (ctx->args.positionals.size() != 1)
    return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "nsbox sh takes one sandbox id or name, then -- CMD"));
  auto req = command_request(ctx->args, true);
  if (!req) return ctx->out.error(req.error());
  // A terminal: no deadline, no capture; the local terminal in raw mode (pty_commands.cc).
  if (ctx->args.has("tty")) return sh_on_tty(*ctx, ctx->args.positionals.front(), *req);
  Captured captured;
  // --json: the supervisor's capture is the result (stdout cut at 64 KiB, the rest in a
  // file); no output is streamed.
  Streamed streamed(ctx->args.has("raw"));
  OutputCallback sink = ctx->out.json ? OutputCallback() : streamed.sink();
  auto result = ctx->runtime->exec(ctx->args.positionals.front(), *req, sink, stdin_for_command());
  streamed.out.flush();
  streamed.err.flush();
  return finish(ctx->out, result, captured);
}

int cmd_run(const Invocation& inv) {
  int code = 0;
  auto ctx = prepare(inv, code);
  if (!ctx) return code;
  if (!ctx->args.positionals.empty())
    return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "unexpected argument '" + ctx->args.positionals[0] + "'",
                                     "put the command after --"));
  RunOptions options;
  auto size = parse_size_tier(ctx->args.value("size", "standard"));
  if (!size) return ctx->out.error(size.error());
  options.size = *size;
  std::string net_flag = ctx->args.value("net", "none");
  auto net = network::parse_mode(net_flag.starts_with("allow") ? "allow" : net_flag);  // run() says why not
  if (!net) return ctx->out.error(net.error());
  options.net = *net;
  auto req = command_request(ctx->args, false);
  if (!req) return ctx->out.error(req.error());
  options.command = std::move(*req);
  options.env = {};
  options.stdin_fd = stdin_for_command();
  Captured captured;
  Streamed streamed(ctx->args.has("raw"));
  if (ctx->out.json) options.on_output = capture_into(captured);
  else if (!ctx->args.has("raw") && (::isatty(STDOUT_FILENO) || ::isatty(STDERR_FILENO))) options.on_output = streamed.sink();
  // else: straight to our stdout/stderr
  auto result = ctx->runtime->run(options);
  streamed.out.flush();
  streamed.err.flush();
  return finish(ctx->out, result, captured);
}

}  // namespace nsbox::cli
