// One call of a helper from inside a sandbox, and its answer, as the bridge process sees
// them (docs/tools.md). Every helper answers a (result, error) pair: `error` empty means
// success; a remote's failure is an answer, never an exception.
#pragma once

#include <string>

#include "runtime/protocol/frame.h"

namespace nsbox::tools {

// What reaches the bridge: the helpers (smart_file_extract only for what it cannot read
// inside the sandbox), and tool_schema, which nsbox_helpers asks to correct argument names.
inline constexpr const char* kHelpers[] = {"run_tool",          "invoke_llm",  "proxy_execute",     "web_search",
                                           "upload_local_file", "tool_schema", "smart_file_extract"};

struct ToolCall {
  std::string helper;  // one of kHelpers
  protocol::Json args;  // an object; its fields are the helper's (docs/tools.md)
};

struct ToolAnswer {
  protocol::Json result;  // null on an error
  std::string error;

  static ToolAnswer ok(protocol::Json result) { return {std::move(result), {}}; }
  static ToolAnswer failed(std::string error) { return {nullptr, std::move(error)}; }
};

}  // namespace nsbox::tools
