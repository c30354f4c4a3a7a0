#include "runtime/toolbridge/local_tools.h"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "isolation/sys/program.h"

namespace nsbox::tools {
namespace {

using protocol::Json;

std::vector<std::string> tool_environment(const ToolsConfig& config, const std::string& name) {
  std::vector<std::string> env = {"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "NSBOX_TOOL=" + name,
                                  "NSBOX_USER_ID=" + config.user_id};
  if (const char* home = std::getenv("HOME")) env.push_back(std::string("HOME=") + home);
  return env;
}

std::string tail(const std::string& text, size_t n) { return text.size() <= n ? text : "..." + text.substr(text.size() - n); }

}  // namespace

bool is_plain_name(const std::string& name) {
  if (name.empty() || name.size() > 128 || name[0] == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
  });
}

bool LocalTools::has(const std::string& name) const {
  if (!is_plain_name(name)) return false;
  std::string path = config_.tools_dir + "/" + name;
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

ToolAnswer LocalTools::run(const std::string& name, const Json& arguments) const {
  if (!has(name))
    return ToolAnswer::failed(name + ": no such tool (no executable " + (is_plain_name(name) ? config_.tools_dir + "/" + name : "of that name") +
                              "); `nsbox tools ls` lists them");
  std::string input = arguments.dump(-1, ' ', false, Json::error_handler_t::replace);
  sys::ProgramRun r = sys::run_program({config_.tools_dir + "/" + name}, config_.tools_dir, tool_environment(config_, name),
                                       input, config_.call_timeout_s, kMaxStdout, kMaxStderr);
  if (r.timed_out) return ToolAnswer::failed(name + ": the tool did not finish within " + std::to_string(static_cast<int>(config_.call_timeout_s)) + " s and was killed");
  if (r.out_cut) return ToolAnswer::failed(name + ": the tool printed more than 16 MiB");
  if (r.status < 0) return ToolAnswer::failed(name + ": could not run the tool: " + r.err);
  if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0)
    return ToolAnswer::failed(name + ": the tool " + sys::describe_wait_status(r.status) + ": " + tail(r.err, 2000));
  if (std::string past = protocol::past_limits(protocol::measure_json(r.out), protocol::kAnswerJson, name + ": the tool's output");
      !past.empty())
    return ToolAnswer::failed(past);
  Json result = Json::parse(r.out, nullptr, false);
  if (result.is_discarded())
    return ToolAnswer::failed(name + ": the tool's output is not JSON: " + r.out.substr(0, 200));
  return ToolAnswer::ok(std::move(result));
}

Json LocalTools::schema(const std::string& name) const {
  if (!is_plain_name(name)) return nullptr;
  std::ifstream in(config_.tools_dir + "/" + name + ".schema.json");
  if (!in) return nullptr;
  std::stringstream text;
  text << in.rdbuf();
  Json schema = Json::parse(text.str(), nullptr, false);
  return schema.is_object() ? schema : Json();
}

Result<Json> LocalTools::list() const {
  DIR* d = ::opendir(config_.tools_dir.c_str());
  if (!d) return fail(sys_error("list the tools in " + config_.tools_dir));
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d))
    if (has(e->d_name)) names.push_back(e->d_name);
  ::closedir(d);
  std::sort(names.begin(), names.end());
  Json items = Json::array();
  for (const auto& n : names) {
    Json item = {{"slug", n}};
    if (Json s = schema(n); !s.is_null()) {
      if (s.contains("description")) item["description"] = s["description"];
      item["input_parameters"] = s;
    }
    items.push_back(std::move(item));
  }
  return items;
}

}  // namespace nsbox::tools
