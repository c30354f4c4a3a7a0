// create, ls, inspect, stop, start, resize, rm.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <functional>
#include <type_traits>
#include <sstream>

#include <unistd.h>

#include "cli/command_table.h"
#include "cli/context.h"
#include "isolation/sys/files.h"
#include "mounts/volume_image.h"

namespace nsbox::cli {
namespace {

std::string limits_text(SizeTier size) {
  Limits l = limits_for(size);
  return std::to_string(l.vcpus) + " vCPU, " + format_bytes(l.memory_bytes) + ", " + std::to_string(l.pids) + " pids";
}

Result<std::string> one_id(const ParsedArgs& args, const char* command) {
  if (args.positionals.size() != 1)
    return fail(make_error(ErrorCode::kInvalidArgument, std::string("nsbox ") + command + " takes one sandbox id or name"));
  return args.positionals.front();
}

// --env K=V flags as a document's "env" object.
Result<nlohmann::json> env_document(const ParsedArgs& args) {
  nlohmann::json env = nlohmann::json::object();
  if (auto it = args.values.find("env"); it != args.values.end())
    for (const auto& text : it->second) {
      auto [k, v] = NSBOX_TRY(parse_env_assignment(text));
      env[k] = v;
    }
  return env;
}

// A create flag's value as its spec field takes it: a boolean's switch is true; digits
// are a number for a numeric field; other text goes as it is (a size such as 10G is the
// spec's to read, and to refuse).
nlohmann::json field_value(const FlagHelp& flag, const ParsedArgs& args) {
  nlohmann::json value = args.value(flag.name);
  SandboxSpec probe;
  spec_fields(probe, [&](const char* key, auto& field, SpecFieldOrigin, auto...) {
    using T = std::decay_t<decltype(field)>;
    if (std::string_view(key) != flag.field) return;
    if constexpr (std::is_same_v<T, bool>) {
      value = true;
    } else if constexpr (std::is_arithmetic_v<T>) {
      std::string text = args.value(flag.name);
      if (!text.empty() && text.size() < 20 && std::all_of(text.begin(), text.end(), ::isdigit)) value = std::stoull(text);
    }
  });
  return value;
}

// --user NAME[:UID] as the create document's user (runtime/core/sandbox_accounts.h
// checks the name and the id).
Result<nlohmann::json> user_flag(const std::string& flag) {
  auto colon = flag.find(':');
  if (colon == std::string::npos) return nlohmann::json{{"name", flag}};
  std::string id = flag.substr(colon + 1);
  uint64_t uid = 0;
  auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), uid);
  if (id.empty() || ec != std::errc() || end != id.data() + id.size())
    return fail(make_error(ErrorCode::kInvalidArgument, "--user " + flag + ": the id after ':' must be a number"));
  return nlohmann::json{{"name", flag.substr(0, colon)}, {"uid", uid}};
}

// The create document (runtime/client/create_options.h) from the flags: one parser for the
// CLI, the server and the Python client. --mount flags and --manifest entries become its
// mounts; their credentials come from this command's environment (or a mount's
// credentials file) and go to the supervisor, never to disk.
Result<nlohmann::json> create_document(const ParsedArgs& args) {
  nlohmann::json doc = nlohmann::json::object();
  if (args.values.count("size")) doc["size"] = args.value("size");
  // The flags that set the spec's plain fields (their `field` in the flag table).
  for (const FlagHelp& flag : find_command("create")->flags)
    if (flag.field && args.has(flag.name)) doc[flag.field] = field_value(flag, args);
  // The policy itself is made with the packages' index (create_options.cc), which may
  // add a host that --net-allow-private names.
  if (args.values.count("net") || args.values.count("net-allow-private")) {
    std::string mode = args.value("net", "none");
    nlohmann::json net = mode;
    if (mode.starts_with("allow=")) net = NSBOX_TRY(net::NetPolicy::parse(mode)).to_json();
    if (args.values.count("net-allow-private")) {
      if (!net.is_object()) {
        if (mode != "none")
          return fail(make_error(ErrorCode::kInvalidArgument, "--net-allow-private needs --net allow=... (or --pip-index)"));
        net = {{"allow", nlohmann::json::array()}};
      }
      net["allow_private"] = net::split_list(args.value("net-allow-private"));
    }
    doc["net"] = std::move(net);
  }
  nlohmann::json packages = nlohmann::json::object();
  if (args.values.count("pip-index")) packages["pip_index"] = args.value("pip-index");
  if (args.values.count("wheelhouse")) packages["wheelhouse"] = absolute_path(args.value("wheelhouse"));
  if (args.values.count("packages-allow")) packages["allow"] = net::split_list(args.value("packages-allow"));
  if (args.values.count("auto-install")) {
    std::string v = args.value("auto-install");
    if (v != "on" && v != "off")
      return fail(make_error(ErrorCode::kInvalidArgument, "--auto-install takes on or off, not '" + v + "'"));
    packages["auto_install"] = v == "on";
  }
  if (!packages.empty()) doc["packages"] = std::move(packages);
  if (args.values.count("env")) doc["env"] = NSBOX_TRY(env_document(args));
  nlohmann::json mounts = nlohmann::json::array();
  if (auto it = args.values.find("mount"); it != args.values.end())
    for (const auto& flag : it->second) mounts.push_back(flag);
  if (auto it = args.values.find("manifest"); it != args.values.end())
    for (const auto& path : it->second) {
      std::string text = NSBOX_TRY(files::read_file(path, 64 << 20));
      auto parsed = nlohmann::json::parse(text, nullptr, false);
      if (!is_manifest_v1(parsed)) {
        for (auto& m : NSBOX_TRY(bucket::parse_manifest(text, path))) mounts.push_back(m.to_json());
        continue;
      }
      if (doc.contains("manifest"))
        return fail(make_error(ErrorCode::kInvalidArgument, "--manifest " + path + ": only one manifest with entries may be given"));
      doc["manifest"] = std::move(parsed);
      // Its local_file, local_dir and git_repo sources come from its own directory, or
      // one granted (runtime/client/manifest.h); both by their real paths.
      nlohmann::json grants = nlohmann::json::array();
      if (auto g = args.values.find("local-grant"); g != args.values.end())
        for (const auto& dir : g->second) grants.push_back(NSBOX_TRY(real_dir(dir, "--local-grant")));
      doc["local_sources"] = {{"base", NSBOX_TRY(real_dir(path, "--manifest"))}, {"grants", grants}};
    }
  if (!mounts.empty()) doc["mounts"] = std::move(mounts);
  if (auto it = args.values.find("user"); it != args.values.end()) {
    nlohmann::json users = nlohmann::json::array();
    for (const auto& flag : it->second) users.push_back(NSBOX_TRY(user_flag(flag)));
    doc["users"] = std::move(users);
  }
  if (nlohmann::json tools = tools_document(args); !tools.empty()) doc["tools"] = std::move(tools);
  return doc;
}

// Acts on each of `targets` in turn: what each gave is listed (its line, or the
// document {key: [items]} with --json); a failure is said and the rest go on. The exit
// status is the last failure's, 0 when none failed.
struct Done {
  nlohmann::json item;
  std::string line;
};
int for_each_target(CommandContext& ctx, std::vector<std::string> targets, const char* key,
                    const std::function<Result<Done>(const std::string&)>& act) {
  nlohmann::json items = nlohmann::json::array();
  int exit_code = 0;
  for (const auto& target : targets) {
    auto done = act(target);
    if (!done) {
      exit_code = ctx.out.error(done.error());
      continue;
    }
    items.push_back(std::move(done->item));
    if (!ctx.out.json) ctx.out.line(done->line);
  }
  if (ctx.out.json) ctx.out.document({{key, items}});
  return exit_code;
}

}  // namespace

int cmd_create(const Invocation& inv) {
  int code = 0;
  auto ctx = prepare(inv, code);
  if (!ctx) return code;
  if (!ctx->args.positionals.empty())
    return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "unexpected argument '" + ctx->args.positionals[0] + "'"));
  auto doc = create_document(ctx->args);
  if (!doc) return ctx->out.error(doc.error());
  auto options = create_options_from_json(*doc, tools_environment(ctx->args), Caller::kLocal);
  if (!options) return ctx->out.error(options.error());

  auto info = ctx->runtime->create(*options);
  if (!info) return ctx->out.error(info.error());
  if (!info->warning.empty()) ctx->out.note("warning: " + info->warning);
  if (ctx->out.json) ctx->out.document(info->to_json());
  else ctx->out.line(info->record.id);
  return 0;
}

int cmd_ls(const Invocation& inv) {
  int code = 0;
  auto ctx = prepare(inv, code);
  if (!ctx) return code;
  auto list = ctx->runtime->list();
  if (!list) return ctx->out.error(list.error());
  // A warm pool's free members are the server's, not anybody's sandboxes yet.
  const bool all = ctx->args.has("all");
  std::erase_if(*list, [&](const SandboxInfo& info) { return !all && !info.record.facts.pool.empty(); });
  if (ctx->out.json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& info : *list) arr.push_back(info.to_json());
    ctx->out.document({{"sandboxes", arr}});
    return 0;
  }
  char line[256];
  std::snprintf(line, sizeof line, "%-12s %-20s %-9s %-5s %-8s %-20s%s", "ID", "NAME", "SIZE", "NET", "STATUS", "CREATED",
                all ? " POOL" : "");
  auto print = [&] {
    std::string text = line;
    text.erase(text.find_last_not_of(' ') + 1);
    ctx->out.line(text);
  };
  print();
  for (const auto& info : *list) {
    const SandboxSpec& r = info.record.spec;
    const SandboxFacts& f = info.record.facts;
    std::snprintf(line, sizeof line, "%-12s %-20s %-9s %-5s %-8s %-20s%s", info.record.id.c_str(), r.name.empty() ? "-" : r.name.c_str(),
                  std::string(size_tier_name(r.size)).c_str(), std::string(network::mode_name(r.net.mode)).c_str(),
                  std::string(status_name(info.status)).c_str(), f.created_at.c_str(),
                  all ? (" " + (f.pool.empty() ? std::string("-") : f.pool)).c_str() : "");
    print();
  }
  return 0;
}

int cmd_inspect(const Invocation& inv) {
  int code = 0;
  auto ctx = prepare(inv, code);
  if (!ctx) return code;
  auto id = one_id(ctx->args, "inspect");
  if (!id) return ctx->out.error(id.error());
  if (ctx->args.has("state")) {
    auto state = ctx->runtime->state(*id);
    if (!state) return ctx->out.error(state.error());
    std::puts(state->dump(2).c_str());  // JSON whatever --json says: it is for a file
    return 0;
  }
  auto info = ctx->runtime->inspect(*id);
  if (!info) return ctx->out.error(info.error());
  if (ctx->out.json) {
    ctx->out.document(info->to_json());
    return 0;
  }
  const SandboxSpec& r = info->record.spec;
  const SandboxFacts& f = info->record.facts;
  std::ostringstream s;
  s << "id:          " << info->record.id << "\n"
    << "name:        " << (r.name.empty() ? "-" : r.name) << "\n"
    << "status:      " << status_name(info->status) << "\n"
    << "size:        " << size_tier_name(r.size) << " (" << limits_text(r.size) << ")\n"
    << "limits:      " << enforcement_name(f.enforcement) << "\n"
    << "network:     " << r.net.describe() << "\n"
    << "created:     " << f.created_at << "\n"
    << "files:       /mnt/files: " << (info->volume ? info->volume->name + (info->volume->named ? " (named volume)" : "") +
                                        (info->volume->quota_bytes ? ", quota " + format_bytes(info->volume->quota_bytes) : ", no quota")
                                                               : std::string("?")) << "\n"
    << "supervisor:  pid " << f.supervisor_pid << ", init pid " << f.init_pid;
  if (!info->kernel_origin.empty())
    s << "\nkernel:      " << (info->kernel_origin == "zygote" ? "forked by the kernel zygote" : "started by the sandbox's init")
      << (info->kernel_zygote_fallback.empty() ? "" : " (not the zygote's: " + info->kernel_zygote_fallback + ")");
  if (info->memory_usage_bytes) s << "\nmemory used: " << (*info->memory_usage_bytes >> 20) << " MiB";
  if (info->oom_kills) s << "\noom kills:   " << info->oom_kills;
  if (!r.env_names.empty()) {
    s << "\nenv:        ";
    for (const auto& n : r.env_names) s << " " << n;
  }
  if (r.net.mode == network::Mode::kHost) s << "\nwarning:     --net host shares the host's network: no isolation of the network";
  if (!info->net_denials.empty()) {
    s << "\nrefused:     (the proxy's last " << info->net_denials.size() << ")";
    for (const auto& d : info->net_denials) s << "\n  " << d.value("time", "") << "  " << d.value("reason", "");
  }
  ctx->out.line(s.str());
  return 0;
}

int cmd_net(const Invocation& inv) {
  int code = 0;
  auto ctx = prepare(inv, code);
  if (!ctx) return code;
  auto id = one_id(ctx->args, "net");
  if (!id) return ctx->out.error(id.error());
  if (!ctx->args.values.count("allow"))
    return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "nsbox net needs --allow HOST[,...] (\"\" allows nothing)"));
  auto allow = net::AllowList::parse(ctx->args.value("allow"), ctx->args.value("allow-private", ""));
  if (!allow) return ctx->out.error(allow.error());
  auto info = ctx->runtime->set_allowlist(*id, *allow);
  if (!info) return ctx->out.error(info.error());
  if (ctx->out.json) ctx->out.document(info->to_json());
  else ctx->out.line(info->record.id + ": " + info->record.spec.net.describe());
  return 0;
}

int cmd_ttl(const Invocation& inv) {
  int code = 0;
  auto ctx = prepare(inv, code);
  if (!ctx) return code;
  const auto& pos = ctx->args.positionals;
  if (pos.size() != 2)
    return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "nsbox ttl takes a sandbox id or name, then SECONDS"));
  // The seconds as a create's --ttl reads them (the spec's bounds, the same error).
  SandboxSpec asked;
  nlohmann::json seconds = pos[1];
  if (!pos[1].empty() && pos[1].size() < 20 && std::all_of(pos[1].begin(), pos[1].end(), ::isdigit)) seconds = std::stoull(pos[1]);
  if (auto read = read_request_fields({{"ttl_s", seconds}}, asked); !read) return ctx->out.error(read.error());
  auto info = ctx->runtime->set_ttl(pos[0], asked.ttl_s);
  if (!info) return ctx->out.error(info.error());
  if (ctx->out.json) ctx->out.document(info->to_json());
  else ctx->out.line(info->record.id + ": removed at " + info->record.facts.expires_at);
  return 0;
}

int cmd_resize(const Invocation& inv) {
  int code = 0;
  auto ctx = prepare(inv, code);
  if (!ctx) return code;
  auto id = one_id(ctx->args, "resize");
  if (!id) return ctx->out.error(id.error());
  if (!ctx->args.values.count("size"))
    return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "nsbox resize needs --size"));
  auto size = parse_size_tier(ctx->args.value("size"));
  if (!size) return ctx->out.error(size.error());
  auto info = ctx->runtime->resize(*id, *size);
  if (!info) return ctx->out.error(info.error());
  if (ctx->out.json) ctx->out.document(info->to_json());
  else ctx->out.line(info->record.id + ": size " + std::string(size_tier_name(*size)) + " (" + limits_text(*size) + ")");
  return 0;
}

int cmd_stop(const Invocation& inv) {
  int code = 0;
  auto ctx = prepare(inv, code);
  if (!ctx) return code;
  if (ctx->args.positionals.empty())
    return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "nsbox stop takes one or more sandbox ids or names"));
  return for_each_target(*ctx, ctx->args.positionals, "stopped", [&](const std::string& target) -> Result<Done> {
    auto info = NSBOX_TRY(ctx->runtime->stop(target));
    return Done{{{"id", info.record.id}, {"status", status_name(info.status)}, {"kernel_state_lost", true}},
                info.record.id + ": stopped (the kernel's state is lost; files and /home/user are kept)"};
  });
}

int cmd_start(const Invocation& inv) {
  int code = 0;
  auto ctx = prepare(inv, code);
  if (!ctx) return code;
  auto id = one_id(ctx->args, "start");
  if (!id) return ctx->out.error(id.error());
  auto env = env_document(ctx->args);
  if (!env) return ctx->out.error(env.error());
  nlohmann::json doc = {{"env", *env}};
  if (ctx->args.values.count("from-snapshot")) doc["from_snapshot"] = ctx->args.value("from-snapshot");
  auto options = start_options_from_json(doc, tools_environment(ctx->args));
  if (!options) return ctx->out.error(options.error());
  auto info = ctx->runtime->start(*id, *options);
  if (!info) return ctx->out.error(info.error());
  if (ctx->out.json) ctx->out.document(info->to_json());
  else ctx->out.line(info->record.id + ": running (a fresh kernel)");
  return 0;
}

int cmd_resume(const Invocation& inv) {
  int code = 0;
  auto ctx = prepare(inv, code);
  if (!ctx) return code;
  if (ctx->args.positionals.size() != 1)
    return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "resume takes one STATE file (from `nsbox inspect ID --state`)"));
  const std::string& path = ctx->args.positionals[0];
  auto text = files::read_file(path, 1 << 20);
  if (!text) return ctx->out.error(text.error());
  if (protocol::nests_deeper_than(*text, 64))
    return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "state file " + path + " nests deeper than 64 levels"));
  auto state = nlohmann::json::parse(*text, nullptr, false);
  if (state.is_discarded())
    return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "state file " + path + " is not JSON"));
  // The trusted manifest and --env as a create document: one parser for its mounts (their
  // credentials from this command's environment or the manifest), environment and entries.
  auto doc = create_document(ctx->args);
  if (!doc) return ctx->out.error(doc.error());
  bucket::Environment environment = tools_environment(ctx->args);
  auto trusted = create_options_from_json(*doc, environment, Caller::kLocal);
  if (!trusted) return ctx->out.error(trusted.error());
  ResumeOptions options;
  options.start.env = trusted->launch.env;
  options.start.environment = std::move(environment);
  for (auto& m : trusted->spec.mounts)
    options.start.mounts.push_back({m, trusted->launch.credentials_for(m.mount_path)});
  trusted->launch.wipe();
  options.trusted_manifest = ctx->args.values.count("manifest") > 0;
  for (auto& e : trusted->workspace)
    if (e.ephemeral) options.ephemeral_entries.push_back(std::move(e));
  options.ephemeral = trusted->spec.ephemeral;
  options.manifest_digest = trusted->spec.manifest_digest;
  auto result = ctx->runtime->resume(state, options);
  for (auto& m : options.start.mounts) m.credentials.wipe();
  if (!result) return ctx->out.error(result.error());
  if (ctx->out.json) ctx->out.document(result->to_json());
  else ctx->out.line(result->info.record.id + ": " + result->action + (result->snapshot.empty() ? "" : " (snapshot " + result->snapshot + ")"));
  return 0;
}

int cmd_snapshot(const Invocation& inv) {
  int code = 0;
  auto ctx = prepare(inv, code);
  if (!ctx) return code;
  const auto& pos = ctx->args.positionals;
  std::string verb = pos.empty() ? "" : pos[0];
  if (verb == "create" && pos.size() == 2) {
    auto s = ctx->runtime->snapshot(pos[1], ctx->args.value("name", ""), ctx->args.has("include-files"));
    if (!s) return ctx->out.error(s.error());
    if (ctx->out.json) ctx->out.document(s->to_json());
    else ctx->out.line(s->id);
    return 0;
  }
  if (verb == "ls" && pos.size() == 1) {
    auto list = ctx->runtime->snapshots();
    if (!list) return ctx->out.error(list.error());
    if (ctx->out.json) {
      nlohmann::json arr = nlohmann::json::array();
      for (const auto& s : *list) arr.push_back(s.to_json());
      ctx->out.document({{"snapshots", arr}});
      return 0;
    }
    char line[256];
    std::snprintf(line, sizeof line, "%-20s %-20s %-12s %-9s %-10s %s", "ID", "NAME", "SANDBOX", "MEMBERS", "BYTES", "CREATED");
    ctx->out.line(line);
    for (const auto& s : *list) {
      std::snprintf(line, sizeof line, "%-20s %-20s %-12s %-9llu %-10llu %s", s.id.c_str(), s.name.empty() ? "-" : s.name.c_str(),
                    s.sandbox.c_str(), static_cast<unsigned long long>(s.members), static_cast<unsigned long long>(s.bytes),
                    s.created_at.c_str());
      ctx->out.line(line);
    }
    return 0;
  }
  if (verb == "rm" && pos.size() >= 2) {
    return for_each_target(*ctx, {pos.begin() + 1, pos.end()}, "removed", [&](const std::string& target) -> Result<Done> {
      auto snapshot = NSBOX_TRY(ctx->runtime->find_snapshot(target));
      NSBOX_CHECK(ctx->runtime->remove_snapshot(snapshot.id));
      return Done{snapshot.id, snapshot.id};
    });
  }
  return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "nsbox snapshot takes create ID, ls, or rm ID|NAME...",
                                   "see `nsbox snapshot --help`"));
}

int cmd_rm(const Invocation& inv) {
  int code = 0;
  auto ctx = prepare(inv, code);
  if (!ctx) return code;
  if (ctx->args.positionals.empty())
    return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "nsbox rm takes one or more sandbox ids or names"));
  return for_each_target(*ctx, ctx->args.positionals, "removed", [&](const std::string& target) -> Result<Done> {
    std::string id = NSBOX_TRY(ctx->runtime->store().resolve(target));
    NSBOX_CHECK(ctx->runtime->remove(id, ctx->args.has("keep-files")));
    return Done{id, id};
  });
}

}  // namespace nsbox::cli
