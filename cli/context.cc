#include "cli/context.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include <cmath>
#include <tuple>

#include "cli/command_table.h"
#include "runtime/client/create_options.h"

namespace nsbox::cli {

std::optional<CommandContext> prepare(const Invocation& inv, int& exit_code, bool open_runtime) {
  int failure_exit = inv.command->passes_exit_status ? kExitOwnFailure : 0;
  Output early{inv.json, failure_exit};
  auto args = parse_args(inv.args, inv.command->spec());
  if (!args) {
    Error e = std::move(args.error());
    e.hint = "see `nsbox " + std::string(inv.command->name) + " --help`";
    exit_code = early.error(e);
    return std::nullopt;
  }
  const bool json = inv.json || args->has("json");
  CommandContext ctx{std::move(*args), Output{json, failure_exit}, std::nullopt};
  std::optional<std::string> root = inv.root;
  if (ctx.args.values.count("root")) root = ctx.args.value("root");
  if (open_runtime) {
    std::optional<std::string> snapshot_dir;
    if (ctx.args.values.count("snapshot-dir")) snapshot_dir = absolute_path(ctx.args.value("snapshot-dir"));
    std::optional<std::string> snapshot_store;
    if (ctx.args.values.count("snapshot-store")) snapshot_store = ctx.args.value("snapshot-store");
    auto rt = Runtime::open({root, snapshot_dir, snapshot_store, ""});
    if (!rt) {
      exit_code = ctx.out.error(rt.error());
      return std::nullopt;
    }
    ctx.runtime.emplace(std::move(*rt));
  }
  return ctx;
}

Result<EnvList> env_flags(const ParsedArgs& args) {
  EnvList env;
  auto it = args.values.find("env");
  if (it == args.values.end()) return env;
  for (const auto& text : it->second) env.push_back(NSBOX_TRY(parse_env_assignment(text)));
  return env;
}

std::string absolute_path(std::string path) {
  char cwd[4096];
  if (!path.empty() && path[0] != '/' && ::getcwd(cwd, sizeof cwd)) path = std::string(cwd) + "/" + path;
  return path;
}

Result<std::string> real_dir(const std::string& path, const std::string& flag) {
  std::string dir = absolute_path(path);
  struct stat st{};
  if (::stat(dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) dir = dir.substr(0, dir.rfind('/'));
  char* real = ::realpath(dir.empty() ? "/" : dir.c_str(), nullptr);
  if (!real) return fail(sys_error(flag + " " + path));
  std::string out = real;
  std::free(real);
  return out;
}

nlohmann::json tools_document(const ParsedArgs& args) {
  nlohmann::json tools = nlohmann::json::object();
  for (auto [flag, field, is_path] : {std::tuple{"tools", "backend", false}, {"tools-dir", "tools_dir", true},
                                      {"tools-replay", "replay_file", true}, {"tools-record", "record_file", true},
                                      {"user-id", "user_id", false}, {"llm-url", "llm_url", false},
                                      {"llm-model", "llm_model", false}})
    if (args.values.count(flag)) tools[field] = is_path ? absolute_path(args.value(flag)) : args.value(flag);
  return tools;
}

bucket::Environment tools_environment(const ParsedArgs& args) {
  bucket::Environment env = process_environment();
  if (args.values.count("tools-config"))
    env.emplace_back("NSBOX_TOOLS_CONFIG", absolute_path(args.value("tools-config")));  // the last one counts
  return env;
}

Result<double> timeout_flag(const ParsedArgs& args) {
  if (!args.values.count("timeout")) return kDefaultTimeoutS;
  std::string text = args.value("timeout");
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(v > 0) || v > 86400 || std::isnan(v))
    return fail(make_error(ErrorCode::kInvalidArgument, "invalid --timeout '" + text + "'",
                           "give seconds, more than 0 and at most 86400"));
  return v;
}

}  // namespace nsbox::cli
