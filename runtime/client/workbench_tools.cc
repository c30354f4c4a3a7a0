#include "runtime/client/workbench_tools.h"

#include <set>

namespace nsbox {
namespace {

using protocol::Json;

constexpr const char* kWorkbenchDescription =
    "Runs Python in a persistent sandbox: variables, imports and files survive between calls, as in a notebook. "
    "Each call has a hard limit of 180 seconds, so work in small steps: one cell per step, not a whole program. "
    "For many tool calls, call run_composio_tool(slug, arguments) from a concurrent.futures.ThreadPoolExecutor "
    "(it returns (result, error) and never raises). Save intermediate results to /mnt/files (it persists) so a "
    "long job can resume. End a cell with an expression (or assign `output`) to see its value; do not use "
    "`return` at top level. Long output is cut and saved under /mnt/files/.composio/output; its path is given. "
    "Preloaded helpers: run_composio_tool, invoke_llm, upload_local_file, proxy_execute, web_search, "
    "smart_file_extract. pandas, numpy and matplotlib are installed.";
constexpr const char* kBashDescription =
    "Runs a bash command in the same sandbox as the Python workbench, from /home/user, with a limit of 180 "
    "seconds. Use it for jq, awk, grep and head over large outputs saved in /mnt/files.";

Error malformed(const std::string& tool, std::string message) {
  return make_error(ErrorCode::kMalformedRequest, tool + ": " + std::move(message), "see `nsbox tools schema`");
}

Result<std::string> text_field(const std::string& tool, const Json& input, const char* name, bool required) {
  auto it = input.find(name);
  if (it == input.end() || it->is_null()) {
    if (required) return fail(malformed(tool, std::string("needs \"") + name + "\""));
    return std::string();
  }
  if (!it->is_string()) return fail(malformed(tool, std::string("\"") + name + "\" must be a string"));
  return it->get<std::string>();
}

Result<void> check_fields(const std::string& tool, const Json& input, const std::set<std::string>& allowed) {
  if (!input.is_object()) return fail(malformed(tool, "its input must be a JSON object"));
  for (const auto& [key, value] : input.items())
    if (!allowed.count(key)) return fail(malformed(tool, "unknown field \"" + key + "\""));
  return {};
}

Json field_or_null(const Json& raw, const char* name) {
  auto it = raw.find(name);
  return it == raw.end() ? Json() : *it;
}

Json envelope(Json data, const Json& error) {
  bool ok = error.is_null();
  return {{"data", std::move(data)}, {"error", error}, {"successful", ok}};
}

Result<Json> run_cell(const Runtime& runtime, const std::string& id, const Json& input, const ProgressCallback& on_progress,
                      const CallControl& control) {
  NSBOX_CHECK(check_fields(kWorkbenchTool, input,
                           {"code_to_execute", "thought", "current_step", "current_step_metric", "session_id"}));
  CellOptions cell;
  cell.code = NSBOX_TRY(text_field(kWorkbenchTool, input, "code_to_execute", true));
  std::string step = NSBOX_TRY(text_field(kWorkbenchTool, input, "current_step", false));
  std::string metric = NSBOX_TRY(text_field(kWorkbenchTool, input, "current_step_metric", false));
  std::string session = NSBOX_TRY(text_field(kWorkbenchTool, input, "session_id", false));
  (void)NSBOX_TRY(text_field(kWorkbenchTool, input, "thought", false));
  if (!step.empty() && on_progress) on_progress(step, metric);
  cell.timeout_s = kWorkbenchTimeoutS;
  cell.output_dir = kComposioOutputDir;
  CellResult r = NSBOX_TRY(runtime.execute(id, cell, {}, {}, control));
  const Json& raw = r.raw;
  Json error;
  if (r.status == "error" && raw.contains("error") && raw["error"].is_object()) {
    const Json& e = raw["error"];
    std::string traceback = e.value("traceback", "");
    error = traceback.empty() ? e.value("ename", "Error") + ": " + e.value("evalue", "") : traceback;
  } else if (r.status != "ok") {
    error = raw.value("message", "the cell ended with status " + r.status);
  }
  Json data = {{"results", raw.contains("results") && !raw["results"].is_null() ? raw["results"] : Json("")},
               {"stdout", raw.value("stdout", "")},
               {"stderr", raw.value("stderr", "")},
               {"error", error},
               {"results_file_path", field_or_null(raw, "results_file_path")},
               {"stdout_file_path", field_or_null(raw, "stdout_file_path")},
               {"stderr_file_path", field_or_null(raw, "stderr_file_path")},
               {"status", r.status},
               {"execution_count", field_or_null(raw, "execution_count")},
               {"display", raw.value("display", Json::array())},
               {"abandoned_tool_calls", raw.value("abandoned_tool_calls", 0)},
               {"session", {{"id", session.empty() ? id : session}}}};
  if (!step.empty()) data["current_step"] = step;
  if (!metric.empty()) data["current_step_metric"] = metric;
  if (r.state_lost) data["state_lost"] = true;
  return envelope(std::move(data), error);
}

Result<Json> run_bash(const Runtime& runtime, const std::string& id, const Json& input, const CallControl& control) {
  NSBOX_CHECK(check_fields(kBashTool, input, {"command", "session_id"}));
  std::string command = NSBOX_TRY(text_field(kBashTool, input, "command", true));
  std::string session = NSBOX_TRY(text_field(kBashTool, input, "session_id", false));
  CommandRequest request;
  request.argv = {"bash", "-c", command};
  request.timeout_s = kWorkbenchTimeoutS;
  request.output_dir = kComposioOutputDir;
  NSBOX_CHECK(request.check());
  CommandResult r = NSBOX_TRY(runtime.exec(id, request, {}, -1, control));
  const Json& raw = r.raw;
  Json error;
  if (r.status != "ok") error = r.message.empty() ? "the command exited with status " + std::to_string(r.exit_code) : r.message;
  Json data = {{"stdout", raw.value("stdout", "")},
               {"stderr", raw.value("stderr", "")},
               {"error", error},
               {"exit_code", r.exit_code},
               {"stdoutLines", raw.value("stdout_lines", 0)},
               {"stderrLines", raw.value("stderr_lines", 0)},
               {"stdout_file_path", field_or_null(raw, "stdout_file_path")},
               {"stderr_file_path", field_or_null(raw, "stderr_file_path")},
               {"session", {{"id", session.empty() ? id : session}}}};
  return envelope(std::move(data), error);
}

Json input_schema(bool bash) {
  if (bash)
    return {{"type", "object"},
            {"properties",
             {{"command", {{"type", "string"}, {"description", "The bash command line to run."}}},
              {"session_id", {{"type", "string"}, {"description", "The session to run in (optional)."}}}}},
            {"required", {"command"}}};
  return {{"type", "object"},
          {"properties",
           {{"code_to_execute", {{"type", "string"}, {"description", "The Python code of this step (a cell)."}}},
            {"thought", {{"type", "string"}, {"description", "Why this step, in a sentence."}}},
            {"current_step", {{"type", "string"}, {"description", "A label for the step, e.g. FETCHING_EMAILS."}}},
            {"current_step_metric", {{"type", "string"}, {"description", "Progress as done/total units, e.g. 10/100 emails."}}},
            {"session_id", {{"type", "string"}, {"description", "The session to run in (optional)."}}}}},
          {"required", {"code_to_execute"}}};
}

}  // namespace

Result<Json> run_workbench_tool(const Runtime& runtime, const std::string& id, const std::string& tool, const Json& input,
                                const ProgressCallback& on_progress, const CallControl& control) {
  if (tool == kWorkbenchTool) return run_cell(runtime, id, input, on_progress, control);
  if (tool == kBashTool) return run_bash(runtime, id, input, control);
  return fail(make_error(ErrorCode::kNotFound, "no workbench tool \"" + tool + "\"",
                         std::string("the tools are ") + kWorkbenchTool + " and " + kBashTool));
}

Result<Json> workbench_tool_schemas(const std::string& format) {
  Json out = Json::array();
  for (bool bash : {false, true}) {
    const char* name = bash ? kBashTool : kWorkbenchTool;
    const char* description = bash ? kBashDescription : kWorkbenchDescription;
    if (format == "openai")
      out.push_back({{"type", "function"},
                     {"function", {{"name", name}, {"description", description}, {"parameters", input_schema(bash)}}}});
    else if (format == "anthropic")
      out.push_back({{"name", name}, {"description", description}, {"input_schema", input_schema(bash)}});
    else
      return fail(make_error(ErrorCode::kInvalidArgument, "unknown schema format \"" + format + "\"", "openai or anthropic"));
  }
  return out;
}

}  // namespace nsbox
