// A Composio-compatible tool service: it keeps the users' connected accounts (auth) and
// the tool catalogue (discovery); the bridge adds the API key to each call. The paths are
// templates in the config, because hosted APIs move.
//
//   execute:  POST {base}{execute_path}   x-api-key: KEY   {"arguments": {...}, "user_id": "..."}
//             -> {"data": ..., "error": null|"...", "successful": bool}   => (data, None) | (None, error)
//   proxy:    POST {base}/api/v3/tools/execute/proxy  {"endpoint", "method", "body", "parameters", ...}
//   list:     GET  {base}{list_path}?toolkit_slug=T&search=Q  -> {"items": [{"slug", "input_parameters", ...}]}
#pragma once

#include <mutex>
#include <map>
#include <string>

#include "mounts/http/client.h"
#include "runtime/protocol/tool_call.h"
#include "runtime/core/tools_config.h"

namespace nsbox::tools {

class ComposioRemote {
 public:
  ComposioRemote(const ToolsConfig& config, std::string api_key);

  ToolAnswer execute(const std::string& slug, const protocol::Json& arguments);
  ToolAnswer proxy(const protocol::Json& request);
  // The catalogue, as the remote lists it; each item's schema is remembered for
  // argument-name correction (schema()).
  Result<protocol::Json> list(const std::string& toolkit, const std::string& search);
  // The input schema of `slug` when discovery has seen it (null otherwise); fetched once.
  protocol::Json schema(const std::string& slug);

 private:
  ToolAnswer answer_of(const std::string& what, const Result<struct RemoteReply>& reply);
  http::Headers headers() const;

  const ToolsConfig& config_;
  std::string api_key_;
  http::Client http_;
  std::mutex schemas_mutex_;
  std::map<std::string, protocol::Json> schemas_;  // slug -> input_parameters (bounded: kMaxSchemas)
};

}  // namespace nsbox::tools
