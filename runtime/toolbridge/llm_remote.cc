#include "runtime/toolbridge/llm_remote.h"

#include "runtime/toolbridge/remote_call.h"

namespace nsbox::tools {
namespace {

using protocol::Json;

http::Limits limits_for(const ToolsConfig& c) {
  http::Limits l;
  l.request_timeout_ms = static_cast<int>(c.call_timeout_s + 0.999) * 1000;
  l.stall_timeout_s = l.request_timeout_ms / 1000;  // a model thinks before its first byte
  return l;
}

}  // namespace

LlmRemote::LlmRemote(const ToolsConfig& config, std::string api_key)
    : config_(config), api_key_(std::move(api_key)), http_({.limits = limits_for(config)}) {}

ToolAnswer LlmRemote::complete(const Json& args) {
  const Json options = args.value("options", Json::object());
  Json messages = options.value("messages", Json());
  if (messages.is_null()) {
    if (!args.contains("query") || !args["query"].is_string())
      return ToolAnswer::failed("invoke_llm: give a query (a string) or messages=[{\"role\": ..., \"content\": ...}]");
    messages = Json::array({{{"role", "user"}, {"content", args["query"]}}});
  }
  if (!messages.is_array() || messages.empty()) return ToolAnswer::failed("invoke_llm: messages must be a non-empty list");
  Json body = {{"messages", messages}};
  std::string model = options.contains("model") && options["model"].is_string() ? options["model"].get<std::string>()
                                                                                : config_.llm_model;
  if (!model.empty()) body["model"] = model;
  if (options.contains("max_tokens")) {
    if (!options["max_tokens"].is_number_unsigned()) return ToolAnswer::failed("invoke_llm: max_tokens must be a whole number");
    body["max_tokens"] = options["max_tokens"];
  }
  http::Headers headers;
  if (!api_key_.empty()) headers.emplace_back("authorization", "Bearer " + api_key_);
  std::string url = config_.llm_url;
  while (!url.empty() && url.back() == '/') url.pop_back();
  auto reply = call_remote(http_, "POST", url + "/chat/completions", headers, body, config_.call_timeout_s);
  if (!reply) return ToolAnswer::failed("invoke_llm: " + reply.error().message);
  if (reply->status == 401 || reply->status == 403)
    return ToolAnswer::failed("invoke_llm: the model service refused the API key (HTTP " + std::to_string(reply->status) +
                              "); check NSBOX_LLM_API_KEY or OPENAI_API_KEY where nsbox runs");
  if (reply->status < 200 || reply->status > 299)
    return ToolAnswer::failed("invoke_llm: the model service answered HTTP " + std::to_string(reply->status) + ": " +
                              remote_message(*reply));
  const Json& b = reply->body;
  if (b.is_object() && b.contains("choices") && b["choices"].is_array() && !b["choices"].empty()) {
    const Json& choice = b["choices"][0];
    if (choice.is_object() && choice.contains("message") && choice["message"].is_object()) {
      const Json& content = choice["message"].value("content", Json());
      if (content.is_string()) return ToolAnswer::ok(content);
    }
  }
  return ToolAnswer::failed("invoke_llm: the model service's answer has no choices[0].message.content");
}

}  // namespace nsbox::tools
