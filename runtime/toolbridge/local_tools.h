// Tools as programs in a directory, for offline work (`--tools-dir DIR`): a call of SLUG
// runs the executable DIR/SLUG on the host side, outside the sandbox, with the arguments
// as JSON on its stdin; what it prints on stdout is the result (JSON), and a non-zero exit
// is an error tuple carrying the end of its stderr. The other helpers (invoke_llm,
// web_search, proxy_execute) run DIR/invoke_llm and so on when they exist, with their
// arguments likewise; DIR/SLUG.schema.json, when present, is SLUG's input schema.
//
// Each run has the call's timeout (then its process group is killed), a bounded stdout
// (16 MiB) and stderr (64 KiB), the working directory DIR, and an environment of PATH,
// LANG, HOME and NSBOX_USER_ID only: no secret of nsbox's reaches it.
#pragma once

#include <string>

#include "runtime/protocol/tool_call.h"
#include "runtime/core/tools_config.h"

namespace nsbox::tools {

class LocalTools {
 public:
  static constexpr size_t kMaxStdout = 16u << 20;
  static constexpr size_t kMaxStderr = 64u << 10;

  explicit LocalTools(const ToolsConfig& config) : config_(config) {}

  bool has(const std::string& name) const;  // an executable DIR/name
  ToolAnswer run(const std::string& name, const protocol::Json& arguments) const;
  protocol::Json schema(const std::string& name) const;  // null when there is none
  // Every executable, as {"slug", "description"?, "input_parameters"?}.
  Result<protocol::Json> list() const;

 private:
  const ToolsConfig& config_;
};

// A slug or helper name that names a file in the directory and nothing else: letters,
// digits, '_', '-' and '.', not starting with '.', at most 128 characters.
bool is_plain_name(const std::string& name);

}  // namespace nsbox::tools
