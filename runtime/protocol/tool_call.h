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

// What one call may send (docs/tools.md, "Limits"): its frame's JSON text, and that
// text's shape (protocol::kUntrustedJson: 64 levels, 65,536 values). nsbox_helpers
// (transport.py) refuses a call past them before sending it, with the same words; the
// supervisor refuses it again, whoever sent it.
inline constexpr size_t kMaxCallBytes = 4u << 20;

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
