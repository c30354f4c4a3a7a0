// One call of a helper from inside a sandbox, and its answer, as the bridge process sees
// them (docs/tools.md). Every helper answers a (result, error) pair: `error` empty means
// success; a remote's failure is an answer, never an exception.
#pragma once

#include <string>

#include "runtime/protocol/frame.h"

namespace nsbox::tools {

// The helpers that reach the bridge (smart_file_extract runs inside the sandbox).
inline constexpr const char* kHelpers[] = {"run_tool", "invoke_llm", "proxy_execute", "web_search", "upload_local_file"};

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
