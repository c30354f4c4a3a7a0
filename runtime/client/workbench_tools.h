// The hosted workbench's two tools, answered by a local sandbox, so that an agent loop
// written for Composio's remote workbench runs unchanged (docs/tools.md, "Workbench tool
// shapes"):
//
//   COMPOSIO_REMOTE_WORKBENCH  {code_to_execute, thought?, current_step?, current_step_metric?, session_id?}
//       -> a cell (180 s, long output under /mnt/files/.composio/output)
//   COMPOSIO_REMOTE_BASH_TOOL  {command, session_id?}
//       -> bash -c COMMAND in /home/user (180 s, the same spill place)
//
// Each answers in the hosted envelope {"data": {...}, "error": null | "...", "successful": b}
// with the hosted field names in data: results, stdout, stderr, error, results_file_path,
// stdout_file_path, stderr_file_path, and for bash stdoutLines / stderrLines.
#pragma once

#include <string>

#include "runtime/protocol/frame.h"
#include "runtime/client/runtime.h"

namespace nsbox {

constexpr const char* kWorkbenchTool = "COMPOSIO_REMOTE_WORKBENCH";
constexpr const char* kBashTool = "COMPOSIO_REMOTE_BASH_TOOL";
constexpr double kWorkbenchTimeoutS = 180;

// Runs one call of a workbench tool in sandbox `id`. current_step / current_step_metric go
// to `on_progress` first. A malformed input or an unknown tool is an error (nothing runs).
Result<protocol::Json> run_workbench_tool(const Runtime& runtime, const std::string& id, const std::string& tool,
                                          const protocol::Json& input, const ProgressCallback& on_progress = {},
                                          const CallControl& control = {});

// The two tools' definitions for a model: "openai" ([{"type": "function", "function":
// {...}}]) or "anthropic" ([{"name", "description", "input_schema"}]). Their descriptions
// teach the rules (small cells, thread pools for bulk calls, checkpoints to /mnt/files,
// end with an expression, 180 s per call).
Result<protocol::Json> workbench_tool_schemas(const std::string& format);

}  // namespace nsbox
