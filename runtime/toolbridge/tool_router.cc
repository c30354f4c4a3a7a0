#include "runtime/toolbridge/tool_router.h"

#include <strings.h>

namespace nsbox::tools {

using protocol::Json;

bool is_meta_tool(const std::string& slug) { return ::strncasecmp(slug.c_str(), "COMPOSIO_", 9) == 0; }

Result<std::unique_ptr<ToolRouter>> ToolRouter::create(ToolsConfig config, ToolKeys keys, std::unique_ptr<SharedFiles> shared) {
  std::unique_ptr<ToolRouter> r(new ToolRouter(std::move(config)));
  const ToolsConfig& c = r->config_;
  if (c.backend == ToolsBackend::kComposio) r->remote_ = std::make_unique<ComposioRemote>(c, keys.composio_api_key);
  if (!c.llm_url.empty()) r->llm_ = std::make_unique<LlmRemote>(c, keys.llm_api_key);
  if (!c.tools_dir.empty()) r->local_ = std::make_unique<LocalTools>(c);
  if (!c.replay_file.empty()) r->replay_ = NSBOX_TRY(Replay::load(c.replay_file));
  if (!c.record_file.empty()) r->recorder_.emplace(NSBOX_TRY(Recorder::open(c.record_file)));
  r->shared_ = std::move(shared);
  keys.wipe();
  return r;
}

ToolAnswer ToolRouter::answer(const ToolCall& call) {
  ToolAnswer a = dispatch(call);
  if (recorder_ && call.helper != "upload_local_file" && call.helper != "tool_schema") recorder_->append(call, a);
  return a;
}

ToolAnswer ToolRouter::dispatch(const ToolCall& call) {
  if (!call.args.is_object()) return ToolAnswer::failed(call.helper + ": malformed call (its arguments are not an object)");
  if (call.helper == "upload_local_file") {
    if (!shared_) return ToolAnswer::failed("upload_local_file: the sandbox's files are out of reach of the bridge");
    return shared_->upload(call.args);
  }
  if (call.helper == "tool_schema") return schema(call.args);
  if (call.helper == "run_tool") {
    const Json& tool = call.args.contains("tool") ? call.args["tool"] : Json();
    if (!tool.is_string() || tool.get<std::string>().empty() || tool.get<std::string>().size() > 256)
      return ToolAnswer::failed("run_composio_tool: the tool slug must be a non-empty string (\"GITHUB_LIST_REPOS\")");
    if (is_meta_tool(tool.get<std::string>()))
      return ToolAnswer::failed(tool.get<std::string>() +
                                ": a meta-tool of the workbench cannot be run from inside the sandbox; call the tool it "
                                "would run directly (run_composio_tool(\"GITHUB_...\", {...}))");
    if (call.args.contains("arguments") && !call.args["arguments"].is_object())
      return ToolAnswer::failed(tool.get<std::string>() + ": the arguments must be a dict");
  }
  if (replay_ && config_.backend == ToolsBackend::kReplay) return replay_->answer(call);
  if (replay_)
    if (auto recorded = replay_->find(call)) return std::move(*recorded);
  if (call.helper == "run_tool") return run_tool(call.args);
  return other_helper(call);
}

ToolAnswer ToolRouter::run_tool(const Json& args) {
  const std::string slug = args["tool"].get<std::string>();
  static const Json kNone = Json::object();
  auto given = args.find("arguments");
  const Json& arguments = given != args.end() ? *given : kNone;  // not a copy: it can be megabytes
  if (remote_) return remote_->execute(slug, arguments);
  if (local_) return local_->run(slug, arguments);
  return ToolAnswer::failed(slug + ": no tool backend is configured for this sandbox (--tools composio, --tools-dir DIR or "
                                   "--tools-replay FILE; docs/tools.md)");
}

ToolAnswer ToolRouter::other_helper(const ToolCall& call) {
  const std::string& h = call.helper;
  if (h == "invoke_llm") {
    if (llm_) return llm_->complete(call.args);
    if (remote_ && !config_.llm_tool.empty()) return remote_->execute(config_.llm_tool, call.args);
  } else if (h == "web_search") {
    if (remote_) return remote_->execute(config_.web_search_tool, {{"query", call.args.value("query", Json())}});
  } else if (h == "proxy_execute") {
    if (remote_) return remote_->proxy(call.args);
  } else if (h == "smart_file_extract") {
    if (remote_ && !config_.extract_tool.empty()) return remote_->execute(config_.extract_tool, call.args);
  } else {
    return ToolAnswer::failed(h + ": not a helper of the tool bridge");
  }
  if (local_ && local_->has(h)) return local_->run(h, call.args);
  std::string needs = h == "invoke_llm" ? "--llm-url (an OpenAI-compatible API), a composio remote with an llm_tool, "
                                          "or an executable invoke_llm in --tools-dir"
                     : h == "smart_file_extract"
                         ? "a composio remote with an extract_tool, or an executable smart_file_extract in --tools-dir"
                         : "--tools composio, or an executable " + h + " in --tools-dir";
  if (h == "smart_file_extract")
    return ToolAnswer::failed("smart_file_extract: " + call.args.value("name", std::string("this file")) +
                              " is not PDF, text, CSV or JSON, which the sandbox reads itself, and no extractor is "
                              "configured (needs " + needs + "; docs/tools.md)");
  return ToolAnswer::failed(h + ": not configured for this sandbox (needs " + needs + "; docs/tools.md)");
}

ToolAnswer ToolRouter::schema(const Json& args) {
  std::string slug = args.value("tool", "");
  if (remote_) return ToolAnswer::ok(remote_->schema(slug));
  if (local_) return ToolAnswer::ok(local_->schema(slug));
  return ToolAnswer::ok(nullptr);
}

Result<Json> ToolRouter::list(const std::string& toolkit, const std::string& search) {
  if (remote_) return remote_->list(toolkit, search);
  if (local_) return local_->list();
  return fail(make_error(ErrorCode::kInvalidArgument, "no tool catalogue is configured",
                         "--tools composio (with COMPOSIO_API_KEY) or --tools-dir DIR"));
}

}  // namespace nsbox::tools
