// What answers each helper call in the bridge process (docs/tools.md, "Backends"):
//
// A recording answers first (alone, or in front of another backend: then what it lacks
// goes on):
//   run_tool       replay | composio remote | tools dir         (meta-tools refused)
//   invoke_llm     replay | llm_url | remote's llm_tool | DIR/invoke_llm
//   web_search     replay | remote's web_search_tool | DIR/web_search
//   smart_file_extract  replay | remote's extract_tool | DIR/smart_file_extract
//   proxy_execute  replay | remote's proxy | DIR/proxy_execute
//   tool_schema    the tool's input schema, for argument-name correction in the sandbox
//   upload_local_file   always local (SharedFiles)
//
// and records every call and answer when a recording is configured. Thread-safe: the
// bridge's workers call answer() at once.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "runtime/toolbridge/composio_remote.h"
#include "runtime/toolbridge/llm_remote.h"
#include "runtime/toolbridge/local_tools.h"
#include "runtime/toolbridge/shared_files.h"
#include "runtime/toolbridge/tape.h"
#include "runtime/core/tools_config.h"

namespace nsbox::tools {

class ToolRouter {
 public:
  // Opens the recording and the replay; `shared` is null when the sandbox's files are
  // out of reach (then upload_local_file says so).
  static Result<std::unique_ptr<ToolRouter>> create(ToolsConfig config, ToolKeys keys, std::unique_ptr<SharedFiles> shared);

  ToolAnswer answer(const ToolCall& call);

  // The catalogue for `nsbox tools ls`.
  Result<protocol::Json> list(const std::string& toolkit, const std::string& search);

 private:
  explicit ToolRouter(ToolsConfig config) : config_(std::move(config)) {}
  ToolAnswer dispatch(const ToolCall& call);
  ToolAnswer run_tool(const protocol::Json& args);
  ToolAnswer other_helper(const ToolCall& call);
  ToolAnswer schema(const protocol::Json& args);

  ToolsConfig config_;
  std::unique_ptr<ComposioRemote> remote_;
  std::unique_ptr<LlmRemote> llm_;
  std::unique_ptr<LocalTools> local_;
  std::unique_ptr<SharedFiles> shared_;
  std::optional<Replay> replay_;
  std::optional<Recorder> recorder_;
};

// The hosted workbench's meta-tools (COMPOSIO_*) run the workbench itself; called from
// inside a sandbox they are refused, as the hosted service refuses them.
bool is_meta_tool(const std::string& slug);

}  // namespace nsbox::tools
