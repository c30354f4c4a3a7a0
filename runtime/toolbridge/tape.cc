#include "runtime/toolbridge/tape.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "isolation/sys/files.h"
#include "isolation/sys/log.h"
#include "isolation/sys/rfc3339.h"

namespace nsbox::tools {
namespace {

using protocol::Json;

constexpr size_t kMaxLine = 16u << 20;

std::string key(const std::string& helper, const Json& args) {
  return helper + " " + args.dump(-1, ' ', false, Json::error_handler_t::replace);
}


}  // namespace

Result<Recorder> Recorder::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return fail(sys_error("open the tool-call recording " + path));
  struct stat st{};
  ::fstat(fd, &st);
  return Recorder(path, fd, static_cast<uint64_t>(st.st_size));
}

void Recorder::append(const ToolCall& call, const ToolAnswer& answer) {
  Json line = {{"helper", call.helper}, {"args", call.args}, {"result", answer.result},
               {"error", answer.error.empty() ? Json() : Json(answer.error)}, {"at", sys::now_rfc3339()}};
  std::string text = line.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
  std::lock_guard lock(*mutex_);
  if (text.size() > kMaxLine || size_ + text.size() > kMaxBytes) {
    log::limited(log::Level::kWarn, "record-full",
                 "not recorded: " + call.helper + " (the recording " + path_ + " has reached its limit of 256 MiB, or the call is over 16 MiB)");
    return;
  }
  // One write per line with O_APPEND: a line is never interleaved with another's.
  if (auto written = files::write_all(fd_, text, path_); !written) {
    log::limited(log::Level::kWarn, "record-failed", "recording a tool call: " + written.error().message);
    return;
  }
  size_ += text.size();
}

Result<Replay> Replay::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return fail(sys_error("open the tool-call recording " + path).with_hint("record one with --tools-record"));
  Replay replay;
  std::string text;
  for (size_t number = 1; std::getline(in, text); ++number) {
    if (text.empty()) continue;
    Json line = Json::parse(text, nullptr, false);
    if (!line.is_object() || !line.contains("helper") || !line["helper"].is_string() || !line.contains("args"))
      return fail(make_error(ErrorCode::kInvalidArgument,
                             path + ":" + std::to_string(number) + ": not a recorded call (a JSON object with \"helper\" and \"args\")"));
    const Json& error = line.value("error", Json());
    ToolAnswer answer = error.is_string() ? ToolAnswer::failed(error.get<std::string>())
                                          : ToolAnswer::ok(line.value("result", Json()));
    replay.answers_[key(line["helper"].get<std::string>(), line["args"])].answers.push_back(std::move(answer));
  }
  return replay;
}

std::optional<ToolAnswer> Replay::find(const ToolCall& call) {
  std::lock_guard lock(*mutex_);
  auto it = answers_.find(key(call.helper, call.args));
  if (it == answers_.end()) return std::nullopt;
  Answers& a = it->second;
  ToolAnswer answer = a.answers[std::min(a.next, a.answers.size() - 1)];
  if (a.next < a.answers.size()) ++a.next;
  return answer;
}

ToolAnswer Replay::answer(const ToolCall& call) {
  if (auto found = find(call)) return std::move(*found);
  {
    std::string what = call.helper == "run_tool" ? call.args.value("tool", std::string("run_tool")) : call.helper;
    std::string args = call.args.dump(-1, ' ', false, Json::error_handler_t::replace);
    if (args.size() > 200) args = args.substr(0, 200) + "...";
    return ToolAnswer::failed(what + ": the replay has no recorded answer for this call (" + args + ")");
  }
}

}  // namespace nsbox::tools
