#include "runtime/create_options.h"

#include <set>

#include "mounts/volume_image.h"
#include "runtime/state_store.h"

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

// "a/./b" -> "a/b"; refuses absolute paths, `..` and empty names.
Result<std::string> workspace_path(const std::string& prefix, const std::string& key) {
  if (key.empty() || key.front() == '/' || (key.size() > 1 && key[1] == ':'))
    return fail(invalid("manifest path must be relative: " + prefix + key));
  std::string out;
  size_t start = 0;
  while (start <= key.size()) {
    size_t end = key.find('/', start);
    if (end == std::string::npos) end = key.size();
    std::string part = key.substr(start, end - start);
    if (part == "..") return fail(invalid("manifest path must not escape root: " + prefix + key));
    if (!part.empty() && part != ".") out += (out.empty() ? "" : "/") + part;
    start = end + 1;
  }
  if (out.empty()) return fail(invalid("manifest path names the root itself: " + prefix + key));
  return prefix + out;
}

Result<mode_t> entry_mode(const Json& e) {
  auto it = e.find("mode");
  if (it == e.end()) it = e.find("permissions");
  if (it == e.end()) return static_cast<mode_t>(0755);
  unsigned long mode = 0;
  if (it->is_number_unsigned()) {
    mode = it->get<unsigned long>();
  } else if (it->is_string() && !it->get<std::string>().empty()) {
    std::string text = it->get<std::string>();
    char* end = nullptr;
    mode = std::strtoul(text.c_str(), &end, 8);
    if (*end) return fail(invalid("manifest mode '" + text + "' is not octal"));
  } else {
    return fail(malformed("a manifest entry's \"mode\" must be an octal string or a number"));
  }
  if (mode > 07777) return fail(invalid("manifest mode " + std::to_string(mode) + " is not a file mode"));
  return static_cast<mode_t>(mode);
}

Result<void> add_entries(const Json& entries, const std::string& prefix, std::vector<WorkspaceEntry>& out) {
  if (!entries.is_object()) return fail(malformed("manifest \"entries\" must be an object of path -> entry"));
  for (const auto& [key, e] : entries.items()) {
    std::string path = NSBOX_TRY(workspace_path(prefix, key));
    if (!e.is_object() || !e.contains("type") || !e["type"].is_string())
      return fail(malformed("manifest entry " + path + " needs a \"type\""));
    std::string type = e["type"].get<std::string>();
    // The mode first: a NSBOX_TRY's return from inside a braced initializer would skip the
    // destructor of the members already made (a leak the fuzzer found).
    mode_t mode = NSBOX_TRY(entry_mode(e));
    WorkspaceEntry w{path, type == "dir", {}, mode};
    if (type == "file") {
      if (e.contains("content") && e["content"].is_string()) w.content = e["content"].get<std::string>();
      else if (e.contains("content_b64") && e["content_b64"].is_string())
        w.content = NSBOX_TRY(protocol::base64_decode(e["content_b64"].get<std::string>()));
      else if (e.contains("content") || e.contains("content_b64"))
        return fail(malformed("manifest entry " + path + ": \"content\" must be a string"));
      out.push_back(std::move(w));
    } else if (type == "dir") {
      out.push_back(std::move(w));
      if (e.contains("children")) NSBOX_CHECK(add_entries(e["children"], path + "/", out));
    } else {
      return fail(invalid("manifest entry " + path + " has type '" + type + "'",
                          "this server makes file and dir entries; bucket mounts go in \"mounts\""));
    }
  }
  return {};
}

Result<std::vector<WorkspaceEntry>> workspace_from_json(const Json& m) {
  if (!m.is_object()) return fail(malformed("\"manifest\" must be an object"));
  if (auto root = m.find("root"); root != m.end() && (!root->is_string() || (*root != "/home/user" && *root != "/home/user/")))
    return fail(invalid("manifest root must be /home/user (the sandbox's workspace)", "leave \"root\" out"));
  std::vector<WorkspaceEntry> out;
  if (auto entries = m.find("entries"); entries != m.end()) NSBOX_CHECK(add_entries(*entries, "", out));
  std::set<std::string> seen;
  for (const auto& w : out)
    if (!seen.insert(w.path).second) return fail(invalid("manifest path given twice: " + w.path));
  return out;
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

// A size: bytes, or text such as "10G"; absent: 0.
Result<uint64_t> size_field(const Json& j, const char* key) {
  auto q = j.find(key);
  if (q == j.end()) return uint64_t{0};
  if (q->is_number_unsigned()) return volume_image::parse_size(std::to_string(q->get<uint64_t>()));
  if (q->is_string()) return volume_image::parse_size(q->get<std::string>());
  return fail(malformed("\"" + std::string(key) + "\" must be bytes or a size such as \"10G\""));
}

}  // namespace

Result<CreateOptions> create_options_from_json(const Json& j, const bucket::Environment& env, Caller caller) {
  if (!j.is_object()) return fail(malformed("a sandbox's options are a JSON object"));
  static const std::set<std::string> kFields = {"size", "name", "env", "net", "packages", "volume", "files_quota", "home_size",
                                                "mounts", "manifest", "tools", "from_snapshot"};
  for (const auto& [key, value] : j.items())
    if (!kFields.count(key)) return fail(malformed("unknown field \"" + key + "\""));
  CreateOptions o;
  if (j.contains("size")) o.size = NSBOX_TRY(parse_size_tier(NSBOX_TRY(string_field(j, "size"))));
  if (j.contains("name")) o.name = NSBOX_TRY(string_field(j, "name"));
  if (!o.name.empty()) NSBOX_CHECK(StateStore::validate_name(o.name));
  if (auto p = j.find("packages"); p != j.end()) {
    o.packages = NSBOX_TRY(PackageSources::from_json(*p));
    // A wheelhouse is bound into the sandbox: a remote caller names one only under the
    // server's root for host paths, as it names a tools directory.
    if (caller == Caller::kRemote && !o.packages.wheelhouse.empty()) {
      ToolsConfig as_paths;
      as_paths.tools_dir = o.packages.wheelhouse;
      NSBOX_CHECK(check_remote_tool_paths(as_paths, env));
    }
  }
  o.net = NSBOX_TRY(o.packages.network_policy(j.value("net", Json("none"))));
  if (j.contains("volume")) o.volume = NSBOX_TRY(string_field(j, "volume"));
  if (j.contains("from_snapshot")) o.from_snapshot = NSBOX_TRY(string_field(j, "from_snapshot"));
  o.env = NSBOX_TRY(env_field(j));
  o.files_quota = NSBOX_TRY(size_field(j, "files_quota"));
  o.home_size = NSBOX_TRY(size_field(j, "home_size"));
  if (auto m = j.find("mounts"); m != j.end()) {
    if (!m->is_array()) return fail(malformed("\"mounts\" must be a list"));
    for (const auto& entry : *m) o.mounts.push_back(NSBOX_TRY(mount_from_json(entry, env, caller)));
    std::vector<std::string> paths;
    for (const auto& r : o.mounts) paths.push_back(r.mount.mount_path);
    NSBOX_CHECK(bucket::check_mount_paths(paths));
  }
  if (auto m = j.find("manifest"); m != j.end()) o.workspace = NSBOX_TRY(workspace_from_json(*m));
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
    o.tools = NSBOX_TRY(ToolsConfig::from_json(merged));
    o.tool_keys = NSBOX_TRY(resolve_tool_keys(o.tools, env, file.keys));
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
  StartOptions o{NSBOX_TRY(env_field(j)), env, {}, {}, {}};
  if (j.contains("from_snapshot")) o.from_snapshot = NSBOX_TRY(string_field(j, "from_snapshot"));
  return o;
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
