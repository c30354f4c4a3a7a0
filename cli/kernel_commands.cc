// exec (a cell of Python in the sandbox's kernel), interrupt, restart.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <sstream>

#include "cli/context.h"
#include "isolation/sys/files.h"

namespace nsbox::cli {
namespace {

Result<std::string> read_all(int fd, const std::string& what) {
  std::string data;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(sys_error("read " + what));
    }
    if (n == 0) return data;
    data.append(buf, static_cast<size_t>(n));
    if (data.size() > (12u << 20))
      return fail(make_error(ErrorCode::kLimitExceeded, what + " is larger than 12 MiB", "put large data in a file under /mnt/files"));
  }
}

// -c CODE | -f FILE | - (stdin)
Result<std::string> cell_code(const ParsedArgs& args) {
  // `nsbox exec ID ls`: a command where a cell goes.
  for (size_t i = 1; i < args.positionals.size(); ++i)
    if (args.positionals[i] != "-" || args.has_command) {
      std::string words;
      for (size_t k = i; k < args.positionals.size(); ++k) words += " " + args.positionals[k];
      for (const auto& w : args.command) words += " " + w;
      return fail(make_error(ErrorCode::kInvalidArgument, "nsbox exec runs Python: -c CODE, -f FILE, or - to read stdin",
                             "for a command: nsbox sh " + args.positionals.front() + " --" + words));
    }
  if (args.has_command) {
    std::string words;
    for (const auto& w : args.command) words += " " + w;
    return fail(make_error(ErrorCode::kInvalidArgument, "nsbox exec runs Python, not a command",
                           "for a command: nsbox sh " + args.positionals.front() + " --" + words));
  }
  bool from_stdin = std::find(args.positionals.begin() + 1, args.positionals.end(), "-") != args.positionals.end();
  size_t given = args.values.count("c") + args.values.count("f") + (from_stdin ? 1 : 0);
  if (given != 1)
    return fail(make_error(ErrorCode::kInvalidArgument, "give the cell once: -c CODE, -f FILE, or - to read stdin"));
  if (args.values.count("c")) return args.value("c");
  if (from_stdin) return read_all(STDIN_FILENO, "stdin");
  std::string path = args.value("f");
  auto text = files::read_file(path, 12u << 20);
  if (!text) return fail(std::move(text.error()));
  return *text;
}

int exit_code_for(const std::string& status) {
  if (status == "ok") return 0;
  if (status == "timeout") return 124;
  if (status == "interrupted") return 130;
  if (status == "killed") return 137;
  return 1;
}

void print_cell_end(const Output& out, const protocol::Json& r) {
  auto note_file = [&](const char* stream) {
    std::string key = std::string(stream) + "_file_path";
    if (r.value(std::string(stream) + "_truncated", false))
      out.note(std::string(stream) + " was cut at " + std::to_string(r.value(std::string(stream) + "_bytes", 0)) +
               " bytes" + (r.contains(key) ? "; all of it is in " + r[key].get<std::string>() : ""));
  };
  note_file("stdout");
  note_file("stderr");
  if (r.contains("results") && r["results"].is_string()) {
    std::string text = r["results"].get<std::string>();
    (void)files::write_all(STDOUT_FILENO, text + (text.empty() || text.back() != '\n' ? "\n" : ""), "stdout");
    if (r.contains("results_file_path")) out.note("the result was cut; all of it is in " + r["results_file_path"].get<std::string>());
  }
  if (r.contains("error") && r["error"].is_object())
    (void)files::write_all(STDERR_FILENO, r["error"].value("traceback", ""), "stderr");
  for (const auto& item : r.value("display", protocol::Json::array()))
    out.note("display: " + item.value("type", "?") + " " + item.value("path", ""));
  if (r.contains("message")) out.note(r["message"].get<std::string>());
}

}  // namespace

int cmd_exec(const Invocation& inv) {
  int code = 0;
  auto ctx = prepare(inv, code);
  if (!ctx) return code;
  if (ctx->args.positionals.empty())
    return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "nsbox exec takes a sandbox id or name, then -c CODE, -f FILE or -"));
  auto source = cell_code(ctx->args);
  if (!source) return ctx->out.error(source.error());
  CellOptions cell;
  cell.code = std::move(*source);
  auto timeout = timeout_flag(ctx->args);
  if (!timeout) return ctx->out.error(timeout.error());
  cell.timeout_s = *timeout;
  if (ctx->args.values.count("output-limit")) {
    char* end = nullptr;
    std::string text = ctx->args.value("output-limit");
    unsigned long long v = std::strtoull(text.c_str(), &end, 10);
    if (end == text.c_str() || *end || v > (64ull << 20))
      return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "invalid --output-limit '" + text + "'", "give bytes, at most 64 MiB"));
    cell.output_limit = v;
  }
  OutputCallback on_output;
  ProgressCallback on_progress;
  TerminalText out(STDOUT_FILENO, ctx->args.has("raw")), err(STDERR_FILENO, ctx->args.has("raw"));
  if (!ctx->out.json) {
    on_output = [&](bool is_stdout, std::string_view bytes) { (is_stdout ? out : err).write(bytes); };
    on_progress = [&](const std::string& step, const std::string& metric) {
      ctx->out.note("[" + step + "]" + (metric.empty() ? "" : " " + metric));
    };
  }
  auto result = ctx->runtime->execute(ctx->args.positionals.front(), cell, on_output, on_progress);
  out.flush();
  err.flush();
  if (!result) return ctx->out.error(result.error());
  if (ctx->out.json) ctx->out.document(result->raw);
  else print_cell_end(ctx->out, result->raw);
  return exit_code_for(result->status);
}

namespace {

// `nsbox interrupt ID` and `nsbox restart ID`: one sandbox, one request, nothing printed
// but errors (and {"<done>": true} with --json).
int kernel_action(const Invocation& inv, const char* name, const char* done,
                  Result<void> (Runtime::*action)(const std::string&) const) {
  int code = 0;
  auto ctx = prepare(inv, code);
  if (!ctx) return code;
  if (ctx->args.positionals.size() != 1)
    return ctx->out.error(make_error(ErrorCode::kInvalidArgument, std::string("nsbox ") + name + " takes one sandbox id or name"));
  if (auto r = (*ctx->runtime.*action)(ctx->args.positionals.front()); !r) return ctx->out.error(r.error());
  if (ctx->out.json) ctx->out.document({{done, true}});
  return 0;
}

}  // namespace

int cmd_interrupt(const Invocation& inv) { return kernel_action(inv, "interrupt", "interrupted", &Runtime::interrupt); }
int cmd_restart(const Invocation& inv) { return kernel_action(inv, "restart", "restarted", &Runtime::restart); }

}  // namespace nsbox::cli
