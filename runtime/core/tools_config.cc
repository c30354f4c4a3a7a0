#include "runtime/core/tools_config.h"

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "isolation/sys/files.h"
#include "isolation/sys/secret.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox {
namespace {

using protocol::Json;

Error malformed(std::string message) {
  return make_error(ErrorCode::kMalformedRequest, "tools: " + message, "see docs/tools.md");
}

const std::string* lookup(const bucket::Environment& env, std::string_view name) {
  for (const auto& [k, v] : env)
    if (k == name && !v.empty()) return &v;
  return nullptr;
}

// A URL the bridge may call: http or https, nothing else (file://, gopher:// ... are
// libcurl's too).
bool is_http_url(const std::string& url) {
  return url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0;
}

Result<std::string> read_key_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return fail(sys_error("read the key file " + path));
  std::string key;
  std::getline(in, key);
  while (!key.empty() && (key.back() == '\r' || key.back() == ' ')) key.pop_back();
  if (key.empty()) return fail(make_error(ErrorCode::kInvalidArgument, "the key file " + path + " is empty"));
  return key;
}

}  // namespace

std::string_view tools_backend_name(ToolsBackend backend) {
  switch (backend) {
    case ToolsBackend::kNone: return "none";
    case ToolsBackend::kComposio: return "composio";
    case ToolsBackend::kDir: return "dir";
    case ToolsBackend::kReplay: return "replay";
    case ToolsBackend::kCallback: return "callback";
  }
  return "none";
}

Json ToolsConfig::to_json() const {
  Json j = {{"backend", tools_backend_name(backend)}, {"user_id", user_id}, {"max_in_flight", max_in_flight},
            {"call_timeout_s", call_timeout_s}};
  auto put = [&](const char* name, const std::string& value) {
    if (!value.empty()) j[name] = value;
  };
  put("base_url", base_url);
  put("tools_dir", tools_dir);
  put("replay_file", replay_file);
  put("record_file", record_file);
  put("llm_url", llm_url);
  put("llm_model", llm_model);
  put("llm_tool", llm_tool);
  put("extract_tool", extract_tool);
  if (backend == ToolsBackend::kComposio) {
    j["execute_path"] = execute_path;
    j["list_path"] = list_path;
    j["web_search_tool"] = web_search_tool;
  }
  return j;
}

Result<ToolsConfig> ToolsConfig::from_json(const Json& j) {
  if (!j.is_object()) return fail(malformed("must be an object"));
  ToolsConfig c;
  for (const auto& [key, value] : j.items()) {
    auto text = [&]() -> Result<std::string> {
      if (!value.is_string()) return fail(malformed("\"" + key + "\" must be a string"));
      return value.get<std::string>();
    };
    if (key == "backend") {
      std::string b = NSBOX_TRY(text());
      if (b == "composio") c.backend = ToolsBackend::kComposio;
      else if (b == "dir") c.backend = ToolsBackend::kDir;
      else if (b == "replay") c.backend = ToolsBackend::kReplay;
      else if (b == "callback") c.backend = ToolsBackend::kCallback;
      else if (b == "none") c.backend = ToolsBackend::kNone;
      else return fail(malformed("unknown backend \"" + b + "\" (composio, dir, replay, callback or none)"));
    } else if (key == "user_id") c.user_id = NSBOX_TRY(text());
    else if (key == "base_url") c.base_url = NSBOX_TRY(text());
    else if (key == "tools_dir") c.tools_dir = NSBOX_TRY(text());
    else if (key == "replay_file") c.replay_file = NSBOX_TRY(text());
    else if (key == "record_file") c.record_file = NSBOX_TRY(text());
    else if (key == "llm_url") c.llm_url = NSBOX_TRY(text());
    else if (key == "llm_model") c.llm_model = NSBOX_TRY(text());
    else if (key == "llm_tool") c.llm_tool = NSBOX_TRY(text());
    else if (key == "extract_tool") c.extract_tool = NSBOX_TRY(text());
    else if (key == "execute_path") c.execute_path = NSBOX_TRY(text());
    else if (key == "list_path") c.list_path = NSBOX_TRY(text());
    else if (key == "web_search_tool") c.web_search_tool = NSBOX_TRY(text());
    else if (key == "max_in_flight") {
      if (!value.is_number_unsigned() || value.get<uint64_t>() == 0 || value.get<uint64_t>() > kMaxInFlight)
        return fail(malformed("\"max_in_flight\" must be a whole number from 1 to " + std::to_string(kMaxInFlight)));
      c.max_in_flight = value.get<unsigned>();
    } else if (key == "call_timeout_s") {
      if (!value.is_number() || !(value.get<double>() > 0) || value.get<double>() > 3600)
        return fail(malformed("\"call_timeout_s\" must be seconds in (0, 3600]"));
      c.call_timeout_s = value.get<double>();
    } else {
      return fail(malformed("unknown field \"" + key + "\""));
    }
  }
  for (const std::string* path : {&c.tools_dir, &c.replay_file, &c.record_file})
    if (!path->empty() && (*path)[0] != '/') return fail(malformed("\"" + *path + "\" must be an absolute path"));
  // A directory or a recording alone says which backend is meant.
  if (c.backend == ToolsBackend::kNone && !c.tools_dir.empty()) c.backend = ToolsBackend::kDir;
  else if (c.backend == ToolsBackend::kNone && !c.replay_file.empty()) c.backend = ToolsBackend::kReplay;
  if (c.backend == ToolsBackend::kDir && c.tools_dir.empty()) return fail(malformed("the dir backend needs \"tools_dir\""));
  if (c.backend == ToolsBackend::kReplay && c.replay_file.empty())
    return fail(malformed("the replay backend needs \"replay_file\""));
  for (const std::string* url : {&c.base_url, &c.llm_url})
    if (!url->empty() && !is_http_url(*url)) return fail(malformed("\"" + *url + "\" is not an http:// or https:// URL"));
  for (const std::string* path : {&c.execute_path, &c.list_path})
    if (path->empty() || (*path)[0] != '/') return fail(malformed("the path template \"" + *path + "\" must start with /"));
  if (c.execute_path.find("{slug}") == std::string::npos) return fail(malformed("\"execute_path\" must hold {slug}"));
  return c;
}

Json ToolKeys::to_json() const {
  return {{"composio_api_key", composio_api_key}, {"llm_api_key", llm_api_key}, {"link_key", link_key},
          {"link_base_url", link_base_url}};
}

ToolKeys ToolKeys::from_json(const Json& j) {
  ToolKeys k;
  if (j.is_object()) {
    k.composio_api_key = j.value("composio_api_key", "");
    k.llm_api_key = j.value("llm_api_key", "");
    k.link_key = j.value("link_key", "");
    k.link_base_url = j.value("link_base_url", "");
  }
  return k;
}

void ToolKeys::wipe() {
  for (std::string* s : {&composio_api_key, &llm_api_key, &link_key}) sys::wipe(*s);
}

Result<ToolsConfigFile> load_tools_config_file(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return fail(sys_error("open the tools config " + path));
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) return fail(sys_error("stat " + path));
  if (!S_ISREG(st.st_mode)) return fail(make_error(ErrorCode::kInvalidArgument, "the tools config " + path + " is not a regular file"));
  if (st.st_uid != ::geteuid() || (st.st_mode & 077) != 0)
    return fail(make_error(ErrorCode::kPermissionDenied,
                           "the tools config " + path + " may hold keys, so it must be yours and readable by you only",
                           "chown it to yourself and chmod 600 " + path));
  std::string text = NSBOX_TRY(files::read_file(path, 1 << 20));
  Json j = Json::parse(text, nullptr, false);
  sys::wipe(text);
  if (!j.is_object()) return fail(make_error(ErrorCode::kInvalidArgument, "the tools config " + path + " is not a JSON object"));
  ToolsConfigFile file;
  for (auto& [key, value] : j.items()) {
    if (key == "composio_api_key" || key == "llm_api_key") {
      if (!value.is_string()) return fail(make_error(ErrorCode::kInvalidArgument, path + ": \"" + key + "\" must be a string"));
      (key == "composio_api_key" ? file.keys.composio_api_key : file.keys.llm_api_key) = value.get<std::string>();
    } else {
      file.defaults[key] = value;
    }
  }
  // Its other fields are a tools config's: checked now, so the file's mistakes are its own.
  if (auto checked = ToolsConfig::from_json(file.defaults); !checked)
    return fail(std::move(checked.error()).context(path));
  return file;
}

Result<ToolKeys> resolve_tool_keys(ToolsConfig& config, const bucket::Environment& env, const ToolKeys& file_keys) {
  ToolKeys keys;
  if (config.backend == ToolsBackend::kComposio) {
    if (config.base_url.empty()) {
      const std::string* url = lookup(env, "COMPOSIO_BASE_URL");
      config.base_url = url ? *url : "https://backend.composio.dev";
      if (!is_http_url(config.base_url))
        return fail(malformed("COMPOSIO_BASE_URL \"" + config.base_url + "\" is not an http:// or https:// URL"));
    }
    if (const std::string* key = lookup(env, "COMPOSIO_API_KEY")) keys.composio_api_key = *key;
    else if (const std::string* file = lookup(env, "COMPOSIO_API_KEY_FILE")) keys.composio_api_key = NSBOX_TRY(read_key_file(*file));
    else if (!file_keys.composio_api_key.empty()) keys.composio_api_key = file_keys.composio_api_key;
    else
      return fail(make_error(ErrorCode::kInvalidArgument, "tools: the composio backend needs an API key",
                             "set COMPOSIO_API_KEY (or COMPOSIO_API_KEY_FILE, a file holding it, or composio_api_key in the "
                             "tools config file) where nsbox runs"));
  }
  if (!config.llm_url.empty()) {
    if (const std::string* key = lookup(env, "NSBOX_LLM_API_KEY")) keys.llm_api_key = *key;
    else if (const std::string* key = lookup(env, "OPENAI_API_KEY")) keys.llm_api_key = *key;
    else keys.llm_api_key = file_keys.llm_api_key;
    // A local model server may need no key: then none is sent.
  }
  return keys;
}

}  // namespace nsbox
