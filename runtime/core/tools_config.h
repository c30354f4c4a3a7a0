// How a sandbox's tool bridge is set up (docs/tools.md): which backend answers
// run_composio_tool, where invoke_llm goes, where calls are recorded or replayed from,
// and how many run at once. One JSON form, used by `nsbox create`'s flags, the API's
// `tools` field and the Python client:
//
//   {"backend": "composio" | "dir" | "replay" | "callback" | "none", "user_id": "default",
//    "base_url": "https://backend.composio.dev", "tools_dir": "/srv/tools",
//    "replay_file": "calls.jsonl", "record_file": "calls.jsonl",
//    "llm_url": "http://127.0.0.1:8080/v1", "llm_model": "gpt-4o-mini",
//    "llm_tool": "...", "extract_tool": "...", "web_search_tool": "COMPOSIO_SEARCH_WEB",
//    "max_in_flight": 16, "call_timeout_s": 60}
//
// The keys (ToolKeys) are not part of it: they come from the environment of whoever
// starts the sandbox (or `nsbox serve`'s), go to the bridge process on its stdin, and are
// never written to a state file, a log or anything a sandbox can read.
#pragma once

#include <string>

#include "isolation/sys/error.h"
#include "mounts/bucket/mount_spec.h"
#include "runtime/protocol/frame.h"

namespace nsbox {

// kCallback: an embedder answers (it subscribes to the sandbox's tool calls: GET
// /v1/sandboxes/{id}/events, Sandbox.on_tool_call); no bridge process is involved but for
// upload_local_file.
enum class ToolsBackend { kNone, kComposio, kDir, kReplay, kCallback };

struct ToolsConfig {
  static constexpr unsigned kDefaultInFlight = 16;
  static constexpr unsigned kMaxInFlight = 256;
  static constexpr double kDefaultCallTimeoutS = 60;

  ToolsBackend backend = ToolsBackend::kNone;
  std::string user_id = "default";
  std::string base_url;     // the Composio-compatible remote (COMPOSIO_BASE_URL)
  std::string tools_dir;    // executables named by slug, run on the host
  std::string replay_file;  // answers calls from a recording
  std::string record_file;  // appends each call and its answer (any backend)
  std::string llm_url;      // an OpenAI-compatible API's base ("http://host/v1")
  std::string llm_model;
  // Where the remote's endpoints are: hosted APIs move, so these are templates.
  std::string execute_path = "/api/v3/tools/execute/{slug}";
  std::string list_path = "/api/v3/tools";
  std::string web_search_tool = "COMPOSIO_SEARCH_WEB";  // what web_search runs on the remote
  std::string llm_tool;  // run for invoke_llm when no llm_url is set (the remote's LLM tool)
  std::string extract_tool;  // run for smart_file_extract of what the sandbox cannot read itself
  unsigned max_in_flight = kDefaultInFlight;
  double call_timeout_s = kDefaultCallTimeoutS;

  // Anything configured: a bridge process runs for the sandbox.
  bool enabled() const { return backend != ToolsBackend::kNone || !llm_url.empty() || !record_file.empty(); }
  protocol::Json to_json() const;
  // Checks every field; paths must be absolute (the CLI makes its flags so).
  static Result<ToolsConfig> from_json(const protocol::Json& j);
};

std::string_view tools_backend_name(ToolsBackend backend);

// The secrets: in the supervisor's spec and the bridge's stdin only.
struct ToolKeys {
  std::string composio_api_key;  // COMPOSIO_API_KEY, or the file named by COMPOSIO_API_KEY_FILE
  std::string llm_api_key;       // NSBOX_LLM_API_KEY, else OPENAI_API_KEY
  // Set by `nsbox serve` for the sandboxes it makes: upload_local_file then answers the
  // server's signed links (runtime/links/download_link.h) under this base URL.
  // From the server, its master key; the runtime hands a supervisor its sandbox's key
  // in its place (links::sandbox_link_key), so the bridge never holds the master.
  std::string link_key;
  std::string link_base_url;

  protocol::Json to_json() const;
  static ToolKeys from_json(const protocol::Json& j);
  void wipe();
};

// The keys a config needs, from an environment (else from `file_keys`); fills base_url
// from COMPOSIO_BASE_URL when unset. A composio backend without a key is an error
// naming the variable.
Result<ToolKeys> resolve_tool_keys(ToolsConfig& config, const bucket::Environment& env, const ToolKeys& file_keys = {});

// A tools config file (NSBOX_TOOLS_CONFIG, or `nsbox create --tools-config FILE`): the
// fields of a tools config, as defaults under what a command or request says, and the
// keys ("composio_api_key", "llm_api_key") for when the environment has none. It must be
// a regular file of the user's own that no one else may read (0600): it may hold keys.
struct ToolsConfigFile {
  protocol::Json defaults = protocol::Json::object();
  ToolKeys keys;
};
Result<ToolsConfigFile> load_tools_config_file(const std::string& path);

}  // namespace nsbox
