// Record and replay of tool calls (`--tools-record FILE`, `--tools-replay FILE`), so that
// agent code can be tested offline and deterministically. One JSON line per call:
//
//   {"helper": "run_tool", "args": {"tool": "X", "arguments": {...}}, "result": ..., "error": null, "at": "..."}
//
// A replayed call matches on helper and args exactly (keys compared sorted, so the order
// the code wrote them in does not matter); when one call was recorded several times the
// answers are given in order, the last one repeating. A call with no recording is an
// error that says so — or, when the sandbox has another backend too (`--tools-dir DIR
// --tools-replay FILE`), goes to it: a recording then fixes some answers (a model's,
// say) and the backend gives the rest.
#pragma once

#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "isolation/sys/error.h"
#include "runtime/protocol/tool_call.h"

namespace nsbox::tools {

class Recorder {
 public:
  static constexpr uint64_t kMaxBytes = 256ull << 20;  // then recording stops, and the log says so
  static Result<Recorder> open(const std::string& path);
  Recorder(Recorder&&) = default;

  void append(const ToolCall& call, const ToolAnswer& answer);

 private:
  explicit Recorder(std::string path, int fd, uint64_t size) : path_(std::move(path)), fd_(fd), size_(size) {}
  std::string path_;
  int fd_ = -1;  // owned for the process's life
  uint64_t size_ = 0;
  std::unique_ptr<std::mutex> mutex_ = std::make_unique<std::mutex>();
};

class Replay {
 public:
  static Result<Replay> load(const std::string& path);
  // The recorded answer, or an error saying there is none.
  ToolAnswer answer(const ToolCall& call);
  // The recorded answer, if there is one.
  std::optional<ToolAnswer> find(const ToolCall& call);

 private:
  struct Answers {
    std::vector<ToolAnswer> answers;
    size_t next = 0;
  };
  std::map<std::string, Answers> answers_;  // by key(call)
  std::unique_ptr<std::mutex> mutex_ = std::make_unique<std::mutex>();
};

}  // namespace nsbox::tools
