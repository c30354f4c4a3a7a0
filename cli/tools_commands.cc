// tools (ls, schema) and workbench: the tool bridge's catalogue, the workbench tools'
// definitions for a model, and one call of a workbench tool (docs/tools.md).
#include <sys/wait.h>

#include <cstdio>

#include "cli/context.h"
#include "isolation/sys/program.h"
#include "mounts/bucket/external_helpers.h"
#include "runtime/client/create_options.h"
#include "runtime/core/install_layout.h"
#include "runtime/client/workbench_tools.h"
#include "isolation/sys/secret.h"

extern char** environ;

namespace nsbox::cli {
namespace {

using nlohmann::json;

constexpr double kListTimeoutS = 120;
constexpr size_t kMaxCatalogue = 64u << 20;

// The catalogue comes from nsbox-toolbridge --list (the HTTP client lives there, not in
// this static binary), given the config and keys on its stdin as a sandbox's bridge is.
Result<json> list_tools(const ParsedArgs& args) {
  // As a create would have it: the flags over the tools config file's defaults.
  CreateOptions options = NSBOX_TRY(create_options_from_json({{"tools", tools_document(args)}}, tools_environment(args), Caller::kLocal));
  ToolsConfig& config = options.spec.tools;
  ToolKeys& keys = options.launch.tool_keys;
  if (config.backend != ToolsBackend::kComposio && config.backend != ToolsBackend::kDir)
    return fail(make_error(ErrorCode::kInvalidArgument, "nsbox tools ls needs a catalogue: --tools composio or --tools-dir DIR"));
  auto layout = NSBOX_TRY(InstallLayout::discover());
  std::string input = json{{"tools", config.to_json()}, {"keys", keys.to_json()}}.dump();
  keys.wipe();
  // The environment a sandbox's bridge gets (ToolBridge::spawn): the proxy settings, a
  // PATH and HOME.
  std::vector<std::string> env = bucket::proxy_settings(environ);
  env.push_back("PATH=/usr/sbin:/usr/bin:/sbin:/bin");
  if (const char* home = std::getenv("HOME")) env.push_back(std::string("HOME=") + home);
  auto run = sys::run_program({layout.tool_bridge(), "--list", args.value("toolkit", ""), args.value("search", "")}, "",
                              env, input, kListTimeoutS, kMaxCatalogue, 64 << 10);
  sys::wipe(input);
  json answer = json::parse(run.out, nullptr, false);
  if (!answer.is_object()) {
    std::string why = run.timed_out ? "it did not answer within 120 s" : run.err.empty() ? "no answer" : run.err;
    return fail(make_error(ErrorCode::kInternal, "list the tools (" + layout.tool_bridge() + "): " + why));
  }
  if (!answer.value("ok", false)) {
    const json& e = answer["error"];
    return fail(make_error(error_code_from_name(e.value("code", "internal")), e.value("message", "listing failed"),
                           e.value("hint", "")));
  }
  return answer["tools"];
}

std::string one_line(std::string text, size_t max) {
  for (char& c : text)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  return text.size() > max ? text.substr(0, max - 3) + "..." : text;
}

}  // namespace

int cmd_tools(const Invocation& inv) {
  int code = 0;
  auto ctx = prepare(inv, code, false);
  if (!ctx) return code;
  const auto& pos = ctx->args.positionals;
  std::string verb = pos.empty() ? "" : pos[0];
  if (verb == "schema" && pos.size() == 1) {
    auto schemas = workbench_tool_schemas(ctx->args.value("format", "openai"));
    if (!schemas) return ctx->out.error(schemas.error());
    std::printf("%s\n", schemas->dump(2).c_str());
    return 0;
  }
  if (verb == "ls" && pos.size() == 1) {
    auto tools = list_tools(ctx->args);
    if (!tools) return ctx->out.error(tools.error());
    if (ctx->out.json) {
      ctx->out.document({{"tools", *tools}});
      return 0;
    }
    for (const auto& t : *tools)
      if (t.is_object())
        ctx->out.line(one_line(t.value("slug", "?"), 60) + (t.contains("description") && t["description"].is_string()
                                                                ? "  " + one_line(t["description"].get<std::string>(), 100)
                                                                : ""));
    return 0;
  }
  return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "nsbox tools takes ls or schema", "see `nsbox tools --help`"));
}

int cmd_workbench(const Invocation& inv) {
  int code = 0;
  auto ctx = prepare(inv, code);
  if (!ctx) return code;
  if (ctx->args.positionals.size() != 1 || !ctx->args.values.count("tool"))
    return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "nsbox workbench takes one sandbox id and --tool NAME",
                                     "see `nsbox workbench --help`"));
  json input = json::parse(ctx->args.value("input", "{}"), nullptr, false);
  if (input.is_discarded()) return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "--input is not JSON"));
  auto answer = run_workbench_tool(*ctx->runtime, ctx->args.positionals[0], ctx->args.value("tool"), input,
                                   [&](const std::string& step, const std::string& metric) {
                                     ctx->out.note("[" + step + "]" + (metric.empty() ? "" : " " + metric));
                                   });
  if (!answer) return ctx->out.error(answer.error());
  // One JSON in, one JSON out, whatever the output mode: the hosted tool's answer.
  std::printf("%s\n", answer->dump(-1, ' ', false, json::error_handler_t::replace).c_str());
  return answer->value("successful", false) ? 0 : kExitError;
}

}  // namespace nsbox::cli
