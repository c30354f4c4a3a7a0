// invoke_llm through any OpenAI-compatible chat-completions endpoint:
//
//   POST {llm_url}/chat/completions   Authorization: Bearer KEY (when one is set)
//        {"model": ..., "messages": [...], "max_tokens": N}
//   -> choices[0].message.content    => (text, None)
#pragma once

#include <string>

#include "mounts/http/client.h"
#include "runtime/protocol/tool_call.h"
#include "runtime/core/tools_config.h"

namespace nsbox::tools {

class LlmRemote {
 public:
  LlmRemote(const ToolsConfig& config, std::string api_key);

  // `args`: {"query": "...", "options": {"messages": [...], "model": "...", "max_tokens": N}}
  ToolAnswer complete(const protocol::Json& args);

 private:
  const ToolsConfig& config_;
  std::string api_key_;
  http::Client http_;
};

}  // namespace nsbox::tools
