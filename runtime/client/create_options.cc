#include "runtime/client/create_options.h"

#include <set>

#include "runtime/core/state_store.h"

extern char** environ;

namespace nsbox {
namespace {

using protocol::Json;

Error malformed(std::string message) { return make_error(ErrorCode::kMalformedRequest, std::move(message)); }
Error invalid(std::string message, std::string hint = {}) {
  return make_error(ErrorCode::kInvalidArgument, std::move(message), std::move(hint));
}

Result<std::string> string_field(const Json& j, const char* name) {
  const Json& v = j.at(name);
  if (!v.is_string()) return fail(malformed("\"" + std::string(name) + "\" must be a string"));
  return v.get<std::string>();
}

// The Agents SDK's credential names (and ours) as the environment variables
// bucket::resolve reads, so that a mount's credentials are found and checked one way.
Result<bucket::Environment> credential_variables(const Json& c, bucket::BucketKind kind, bucket::BucketMount& mount) {
  if (!c.is_object()) return fail(malformed("a mount's \"credentials\" must be an object of strings"));
  bucket::Environment env;
  for (const auto& [key, value] : c.items()) {
    if (!value.is_string()) return fail(malformed("credential \"" + key + "\" must be a string"));
    std::string v = value.get<std::string>();
    using K = bucket::BucketKind;
    if (key == "access_key_id" || key == "access_id")
      env.emplace_back(kind == K::kR2 ? "R2_ACCESS_KEY_ID" : kind == K::kGcs ? "GCS_HMAC_ACCESS_ID" : "AWS_ACCESS_KEY_ID", v);
    else if (key == "secret_access_key")
      env.emplace_back(kind == K::kR2 ? "R2_SECRET_ACCESS_KEY" : kind == K::kGcs ? "GCS_HMAC_SECRET" : "AWS_SECRET_ACCESS_KEY", v);
    else if (key == "session_token") env.emplace_back("AWS_SESSION_TOKEN", v);
    else if (key == "account_key" || key == "azure_key") env.emplace_back("AZURE_STORAGE_KEY", v);
    else if (key == "sas_token" || key == "azure_sas") env.emplace_back("AZURE_STORAGE_SAS_TOKEN", v);
    else if (key == "account_id" && mount.account.empty()) mount.account = v;
    else if (key != "account_id") return fail(malformed("unknown credential \"" + key + "\""));
  }
  return env;
}

// What a mount finds in the caller's environment when its credentials are given: the
// region, endpoint and account, never another credential (a request's key must not be
// paired with the server's secret).
bucket::Environment without_credentials(const bucket::Environment& env) {
  bucket::Environment out;
  for (const auto& [k, v] : env)
    if (k.find("KEY") == std::string::npos && k.find("SECRET") == std::string::npos &&
        k.find("TOKEN") == std::string::npos && k.find("HMAC") == std::string::npos)
      out.emplace_back(k, v);
  return out;
}

Result<bucket::MountRequest> mount_from_json(const Json& entry, const bucket::Environment& env, Caller caller) {
  bucket::BucketMount mount;
  if (entry.is_string()) {
    mount = NSBOX_TRY(bucket::parse_mount_flag(entry.get<std::string>()));
  } else if (entry.is_object()) {
    Json fields = entry;
    fields.erase("credentials");
    if (caller == Caller::kRemote && fields.contains("credentials_file"))
      return fail(invalid("a mount's credentials_file names a file on the server's host, which a request may not",
                          "give the credentials in the mount's \"credentials\""));
    mount = NSBOX_TRY(bucket::BucketMount::from_json(fields));
  } else {
    return fail(malformed("each of \"mounts\" must be a --mount string or an object"));
  }
  auto given = entry.is_object() ? entry.find("credentials") : entry.end();
  if (entry.is_object() && given != entry.end()) {
    bucket::Environment own = without_credentials(env);
    for (auto& kv : NSBOX_TRY(credential_variables(*given, mount.kind, mount))) own.push_back(std::move(kv));
    auto credentials = NSBOX_TRY(bucket::resolve(mount, own));
    return bucket::MountRequest{std::move(mount), std::move(credentials)};
  }
  auto credentials = NSBOX_TRY(bucket::resolve(mount, env));
  return bucket::MountRequest{std::move(mount), std::move(credentials)};
}

// A mount into the spec, its credentials into the envelope.
void add_mount(CreateOptions& o, bucket::MountRequest r) {
  o.launch.mount_credentials.push_back({r.mount.mount_path, std::move(r.credentials)});
  o.spec.mounts.push_back(std::move(r.mount));
}

// The tool bridge runs a tools directory's programs and appends to a recording as the
// server's user: a remote caller names them only inside the directory the server's owner
// set aside for that (NSBOX_TOOLS_ROOT), by a path without `..`.
Result<void> check_remote_tool_paths(const ToolsConfig& tools, const bucket::Environment& env) {
  std::string root;
  for (const auto& [k, v] : env)
    if (k == "NSBOX_TOOLS_ROOT") root = v;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  for (const std::string* path : {&tools.tools_dir, &tools.replay_file, &tools.record_file}) {
    if (path->empty()) continue;
    bool inside = !root.empty() && root[0] == '/' && path->rfind(root + "/", 0) == 0 &&
                  path->find("/../") == std::string::npos && !path->ends_with("/..");
    if (!inside)
      return fail(make_error(ErrorCode::kPermissionDenied,
                             "tools: " + *path + " is not under the server's tools root" + (root.empty() ? " (none is set)" : " " + root),
                             "start `nsbox serve` with NSBOX_TOOLS_ROOT=DIR and name paths under DIR"));
  }
  return {};
}

// The file NSBOX_TOOLS_CONFIG names in `env`; empty when none is named.
Result<ToolsConfigFile> tools_config_file(const bucket::Environment& env) {
  ToolsConfigFile file;
  for (const auto& [k, v] : env)
    if (k == "NSBOX_TOOLS_CONFIG" && !v.empty()) file = NSBOX_TRY(load_tools_config_file(v));
  return file;
}

// "env": {"K": "V"}; absent: none.
Result<EnvList> env_field(const Json& j) {
  EnvList out;
  auto e = j.find("env");
  if (e == j.end()) return out;
  if (!e->is_object()) return fail(malformed("\"env\" must be an object of strings"));
  for (const auto& [k, v] : e->items()) {
    if (!v.is_string()) return fail(malformed("env value of " + k + " must be a string"));
    if (k.find('=') != std::string::npos) return fail(invalid("environment variable name '" + k + "' has a '='"));
    out.push_back(NSBOX_TRY(parse_env_assignment(k + "=" + v.get<std::string>())));
  }
  return out;
}

// Where a local caller's manifest may take host files from: {"base": DIR, "grants": [DIR]}
// (the nsbox command sets it from the manifest file's directory and --local-grant).
Result<LocalSourceRoots> local_sources(const Json& doc, Caller caller) {
  LocalSourceRoots roots;
  auto it = doc.find("local_sources");
  if (it == doc.end() || caller == Caller::kRemote) return roots;  // a remote caller's was refused
  if (!it->is_object() || !it->contains("base") || !(*it)["base"].is_string())
    return fail(malformed("\"local_sources\" must be {\"base\": DIR, \"grants\": [DIR]}"));
  roots.base = (*it)["base"].get<std::string>();
  if (auto g = it->find("grants"); g != it->end()) {
    if (!g->is_array()) return fail(malformed("\"local_sources\".grants must be a list of directories"));
    for (const auto& d : *g) {
      if (!d.is_string()) return fail(malformed("\"local_sources\".grants must be a list of directories"));
      roots.grants.push_back(d.get<std::string>());
    }
  }
  if (!roots.base.starts_with("/")) return fail(invalid("\"local_sources\" base " + roots.base + " is not absolute"));
  for (const auto& d : roots.grants)
    if (!d.starts_with("/")) return fail(invalid("--local-grant " + d + " is not absolute"));
  return roots;
}

// The manifest's entries, environment (under the document's own env) and mounts.
Result<void> add_manifest(CreateOptions& o, const Json& m, const Json& doc, const bucket::Environment& env, Caller caller) {
  if (!m.is_object()) return fail(malformed("\"manifest\" must be an object"));
  Manifest manifest = NSBOX_TRY(parse_manifest_v1(m, NSBOX_TRY(local_sources(doc, caller)), o.spec.workspace_root));
  // A manifest's root is the sandbox's workspace root (as the Agents SDK's is its
  // workspace), unless the document names another.
  if (manifest.root != o.spec.workspace_root) {
    if (doc.contains("workspace_root"))
      return fail(invalid("the manifest's root " + manifest.root + " and \"workspace_root\" " + o.spec.workspace_root + " differ",
                          "give one of them"));
    o.spec.workspace_root = manifest.root;
  }
  if (!manifest.accounts.empty()) {
    if (!o.spec.accounts.empty())
      return fail(invalid("both the manifest and the request declare users or groups", "declare them in one place"));
    o.spec.accounts = std::move(manifest.accounts);
  }
  for (auto& kv : manifest.environment) {
    bool given = false;
    for (const auto& [k, v] : o.launch.env) given = given || k == kv.first;
    if (!given) o.launch.env.push_back(std::move(kv));
  }
  for (const auto& entry : manifest.mounts) add_mount(o, NSBOX_TRY(mount_from_json(entry, env, caller)));
  o.spec.ephemeral = manifest.ephemeral_paths();
  o.workspace = std::move(manifest.entries);
  o.spec.manifest_digest = manifest.digest;
  return {};
}
}  // namespace

Result<CreateOptions> create_options_from_json(const Json& j, const bucket::Environment& env, Caller caller) {
  if (!j.is_object()) return fail(malformed("a sandbox's options are a JSON object"));
  // The spec's plain fields a request may set (runtime/core/sandbox_spec.h), and the
  // request's own forms of the others.
  static const std::set<std::string> kForms = {"size",     "env",           "net",   "packages", "mounts",
                                               "manifest", "local_sources", "tools", "users",    "groups"};
  for (const auto& [key, value] : j.items())
    if (!kForms.count(key) && !is_request_field(key)) return fail(malformed("unknown field \"" + key + "\""));
  if (caller == Caller::kRemote && j.contains("local_sources"))
    return fail(make_error(ErrorCode::kPermissionDenied, "\"local_sources\" names directories on the server's host, which a request may not"));
  CreateOptions o;
  SandboxSpec& spec = o.spec;
  NSBOX_CHECK(read_request_fields(j, spec));
  if (j.contains("size")) spec.size = NSBOX_TRY(parse_size_tier(NSBOX_TRY(string_field(j, "size"))));
  if (!spec.name.empty()) NSBOX_CHECK(StateStore::validate_name(spec.name));
  if (auto p = j.find("packages"); p != j.end()) {
    spec.packages = NSBOX_TRY(PackageSources::from_json(*p));
    // A wheelhouse is bound into the sandbox: a remote caller names one only under the
    // server's root for host paths, as it names a tools directory.
    if (caller == Caller::kRemote && !spec.packages.wheelhouse.empty()) {
      ToolsConfig as_paths;
      as_paths.tools_dir = spec.packages.wheelhouse;
      NSBOX_CHECK(check_remote_tool_paths(as_paths, env));
    }
  }
  spec.net = NSBOX_TRY(spec.packages.network_policy(j.value("net", Json("none"))));
  o.launch.env = NSBOX_TRY(env_field(j));
  if (auto m = j.find("mounts"); m != j.end()) {
    if (!m->is_array()) return fail(malformed("\"mounts\" must be a list"));
    for (const auto& entry : *m) add_mount(o, NSBOX_TRY(mount_from_json(entry, env, caller)));
  }
  spec.accounts = NSBOX_TRY(SandboxAccounts::from_request(j.value("users", Json()), j.value("groups", Json())));
  if (auto m = j.find("manifest"); m != j.end()) NSBOX_CHECK(add_manifest(o, *m, j, env, caller));
  if (!spec.mounts.empty()) {
    std::vector<std::string> paths;
    for (const auto& m : spec.mounts) {
      paths.push_back(m.mount_path);
      const std::string& root = spec.workspace_root;
      if (root == m.mount_path || root.starts_with(m.mount_path + "/"))
        return fail(invalid("a bucket cannot be mounted at " + m.mount_path + ": it would hide the workspace root " + root,
                            "mount it inside the workspace, e.g. " + root + "/data"));
    }
    NSBOX_CHECK(bucket::check_mount_paths(paths));
  }
  // The tools config file's fields are defaults under the document's; its keys serve
  // when the environment has none.
  ToolsConfigFile file = NSBOX_TRY(tools_config_file(env));
  auto t = j.find("tools");
  if (t != j.end() || !file.defaults.empty()) {
    Json merged = file.defaults;
    if (t != j.end()) {
      if (!t->is_object()) return fail(malformed("\"tools\" must be an object"));
      // What a request names is checked against the tools root; the file's are the owner's.
      if (caller == Caller::kRemote) NSBOX_CHECK(check_remote_tool_paths(NSBOX_TRY(ToolsConfig::from_json(*t)), env));
      for (const auto& [k, v] : t->items()) merged[k] = v;
    }
    spec.tools = NSBOX_TRY(ToolsConfig::from_json(merged));
    o.launch.tool_keys = NSBOX_TRY(resolve_tool_keys(spec.tools, env, file.keys));
    file.keys.wipe();
  }
  return o;
}

Result<ToolKeys> tool_keys_from(ToolsConfig& tools, const bucket::Environment& env) {
  ToolsConfigFile file = NSBOX_TRY(tools_config_file(env));
  auto keys = resolve_tool_keys(tools, env, file.keys);
  file.keys.wipe();
  return keys;
}

Result<StartOptions> start_options_from_json(const Json& j, const bucket::Environment& env) {
  if (!j.is_object()) return fail(malformed("a start's options are a JSON object"));
  for (const auto& [key, value] : j.items())
    if (key != "env" && key != "from_snapshot") return fail(malformed("unknown field \"" + key + "\""));
  StartOptions o{NSBOX_TRY(env_field(j)), env, {}, {}, {}, {}};
  if (j.contains("from_snapshot")) o.from_snapshot = NSBOX_TRY(string_field(j, "from_snapshot"));
  return o;
}

Result<void> require_env(const std::string& id, const std::vector<std::string>& names, const EnvList& env) {
  std::string missing;
  for (const auto& name : names) {
    bool given = false;
    for (const auto& [k, v] : env) given = given || k == name;
    if (!given) missing += (missing.empty() ? "" : ", ") + name;
  }
  if (missing.empty()) return {};
  return fail(make_error(ErrorCode::kInvalidArgument, "sandbox " + id + " was created with env " + missing + ": give " +
                                                          (missing.find(',') == std::string::npos ? "it" : "them") + " again",
                         "env values are never stored (they may be secrets): pass --env NAME=VALUE again"));
}

bucket::Environment process_environment() {
  bucket::Environment env;
  for (char** e = environ; *e; ++e) {
    std::string_view kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string_view::npos) env.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

}  // namespace nsbox
