// Cells and commands: POST /v1/sandboxes/{id}/cells and .../commands, answered with one
// document or, with Accept: application/x-ndjson, a stream of events (docs/api.md,
// "Streaming").
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>

#include "api/api_service.h"
#include "runtime/client/workbench_tools.h"
#include "api/http_errors.h"
#include "isolation/sys/files.h"
#include "runtime/protocol/frame.h"

namespace nsbox::api {
namespace {

// Output events carry text, never half a character: the bytes of an incomplete UTF-8
// sequence at a chunk's end (at most 3) wait for the next chunk. What is not UTF-8 at all
// goes as base64.
class OutputEvents {
 public:
  explicit OutputEvents(const char* type) : type_(type) {}

  std::optional<Json> take(std::string_view bytes) {
    pending_.append(bytes);
    size_t keep = incomplete_tail(pending_);
    std::string ready = pending_.substr(0, pending_.size() - keep);
    pending_.erase(0, pending_.size() - keep);
    return event(ready);
  }
  std::optional<Json> flush() { return event(std::exchange(pending_, {})); }

 private:
  // The length of a UTF-8 sequence begun at the end of `s` and not finished there.
  static size_t incomplete_tail(const std::string& s) {
    for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
      auto c = static_cast<unsigned char>(s[s.size() - back]);
      if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
      size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      return need > back ? back : 0;
    }
    return 0;
  }
  std::optional<Json> event(const std::string& bytes) const {
    if (bytes.empty()) return std::nullopt;
    Json e = {{"type", type_}};
    if (protocol::is_valid_utf8(bytes)) e["text"] = bytes;
    else e["text_b64"] = protocol::base64_encode(bytes);
    return e;
  }
  const char* type_;
  std::string pending_;
};

// A stream's producer side, on the worker: events go out as they come; once the client
// has gone, they are dropped (the work itself goes on or not, as the endpoint says).
class EventSender {
 public:
  explicit EventSender(Exchange& x) : x_(x) {}
  void send(const Json& e) {
    if (!gone_ && !x_.stream_line(e)) gone_ = true;
    began_ = true;
  }
  bool began() const { return began_; }
  bool gone() const { return gone_; }
  void output(bool is_stdout, std::string_view bytes) {
    if (auto e = (is_stdout ? out_ : err_).take(bytes)) send(*e);
  }
  void flush_output() {
    for (auto* o : {&out_, &err_})
      if (auto e = o->flush()) send(*e);
  }

 private:
  Exchange& x_;
  std::atomic<bool> gone_ = false;
  bool began_ = false;
  OutputEvents out_{"stdout"}, err_{"stderr"};
};

// A cell or command in flight: the warm pool's refill yields to them, the metrics count them.
class Running {
 public:
  Running(std::atomic<int>& calls, std::atomic<int>* cells) : calls_(calls), cells_(cells) {
    ++calls_;
    if (cells_) ++*cells_;
  }
  Running(const Running&) = delete;
  Running& operator=(const Running&) = delete;
  ~Running() {
    --calls_;
    if (cells_) --*cells_;
  }

 private:
  std::atomic<int>& calls_;
  std::atomic<int>* cells_;
};

void end_with(Exchange& x, EventSender& events, const Result<Json>& result) {
  if (!result) {
    if (!events.began()) return respond_error(x, result.error());
    events.send({{"type", "error"}, {"error", error_document(result.error())["error"]}});
  } else {
    Json last = *result;
    last["type"] = "result";
    events.send(last);
  }
  x.end_stream();
}

}  // namespace

Result<std::string> bytes_field(const Json& j, const char* name, bool required) {
  std::string b64 = std::string(name) + "_b64";
  bool has_text = j.contains(name), has_b64 = j.contains(b64);
  if (has_text && has_b64) return fail(make_error(ErrorCode::kMalformedRequest, "give \"" + std::string(name) + "\" or \"" + b64 + "\", not both"));
  if (has_text) {
    if (!j[name].is_string()) return fail(make_error(ErrorCode::kMalformedRequest, "\"" + std::string(name) + "\" must be a string"));
    return j[name].get<std::string>();
  }
  if (has_b64) {
    if (!j[b64].is_string()) return fail(make_error(ErrorCode::kMalformedRequest, "\"" + b64 + "\" must be a string"));
    auto decoded = protocol::base64_decode(j[b64].get<std::string>());
    if (!decoded) return fail(make_error(ErrorCode::kMalformedRequest, "\"" + b64 + "\" is not base64"));
    return *decoded;
  }
  if (required) return fail(make_error(ErrorCode::kMalformedRequest, "\"" + std::string(name) + "\" (or \"" + b64 + "\") is needed"));
  return std::string();
}

Result<Json> command_argv(const Json& body) {
  if (body.contains("command") == body.contains("argv"))
    return fail(make_error(ErrorCode::kMalformedRequest, "give \"command\" (a bash command line) or \"argv\", one of the two"));
  if (!body.contains("command")) return body["argv"];
  if (!body["command"].is_string()) return fail(make_error(ErrorCode::kMalformedRequest, "\"command\" must be a string"));
  return Json::array({"/bin/bash", "-c", body["command"]});
}

void ApiService::run_cell(Exchange& x, const Call& c) {
  Running running(running_calls_, &running_cells_);
  const std::string& sandbox = c.sandbox;
  auto body = body_object(x.request());
  if (!body) return respond_error(x, body.error());
  if (auto ok = only_fields(*body, {"code", "code_b64", "timeout_s", "output_limit"}); !ok) return respond_error(x, ok.error());
  auto code = bytes_field(*body, "code", true);
  if (!code) return respond_error(x, code.error());
  if (code->size() > kMaxCodeBytes)
    return respond_error(x, make_error(ErrorCode::kLimitExceeded, "the cell's code is " + std::to_string(code->size()) +
                                                                      " bytes, more than the limit of 12 MiB"));
  CellOptions cell;
  cell.code = std::move(*code);
  auto timeout = timeout_field(*body, kDefaultTimeoutS);
  if (!timeout) return respond_error(x, timeout.error());
  cell.timeout_s = *timeout;
  if (auto l = body->find("output_limit"); l != body->end()) {
    if (!l->is_number_unsigned() || l->get<uint64_t>() > (64u << 20))
      return respond_error(x, make_error(ErrorCode::kInvalidArgument, "\"output_limit\" must be bytes, at most 64 MiB"));
    cell.output_limit = l->get<size_t>();
  }
  // A client that goes away does not stop the cell: the wait goes on (its events
  // dropped) until the cell ends; only the server's stop ends it early.
  CallControl control{x.cancel_fd(), {}};
  if (!x.request().wants_stream()) {
    auto r = runtime_.execute(sandbox, cell, {}, {}, control);
    if (!r) return respond_error(x, r.error());
    return x.respond(200, r->raw);
  }
  EventSender events(x);
  control.on_started = [&](uint64_t n) { events.send({{"type", "started"}, {"cell", n}}); };
  auto r = runtime_.execute(
      sandbox, cell, [&](bool is_stdout, std::string_view bytes) { events.output(is_stdout, bytes); },
      [&](const std::string& step, const std::string& metric) {
        events.send({{"type", "progress"}, {"step", step}, {"metric", metric.empty() ? Json(nullptr) : Json(metric)}});
      },
      control);
  events.flush_output();
  if (r)
    for (const auto& item : r->raw.value("display", Json::array())) events.send({{"type", "display"}, {"item", item}});
  end_with(x, events, r ? Result<Json>(r->raw) : Result<Json>(std::unexpected(r.error())));
}

void ApiService::run_command(Exchange& x, const Call& c) {
  Running running(running_calls_, nullptr);
  const std::string& sandbox = c.sandbox;
  auto body = body_object(x.request());
  if (!body) return respond_error(x, body.error());
  if (auto ok = only_fields(*body, {"command", "argv", "env", "cwd", "run_as", "timeout_s", "stdin", "stdin_b64"}); !ok)
    return respond_error(x, ok.error());
  Json request = Json::object();
  auto argv = command_argv(*body);
  if (!argv) return respond_error(x, argv.error());
  request["argv"] = std::move(*argv);
  for (const char* k : {"env", "cwd", "run_as", "timeout_s"})
    if (body->contains(k)) request[k] = (*body)[k];
  auto command = CommandRequest::from_json(request);
  if (!command) return respond_error(x, command.error());
  auto input = bytes_field(*body, "stdin", false);
  if (!input) return respond_error(x, input.error());
  UniqueFd stdin_file;
  if (body->contains("stdin") || body->contains("stdin_b64")) {
    stdin_file.reset(::memfd_create("nsbox-stdin", MFD_CLOEXEC));
    if (!stdin_file || !files::write_all(stdin_file.get(), *input, "stdin") || ::lseek(stdin_file.get(), 0, SEEK_SET) != 0)
      return respond_error(x, sys_error("hold the command's stdin"));
  }
  // A client that goes away takes its command with it (as `nsbox sh`): the wait is
  // cancelled, which kills the command.
  CallControl control{x.gone_fd(), {}};
  int stdin_fd = stdin_file ? stdin_file.get() : -1;
  if (!x.request().wants_stream()) {
    auto r = runtime_.exec(sandbox, *command, {}, stdin_fd, control);
    if (!r) return respond_error(x, r.error());
    return x.respond(200, r->to_json());
  }
  EventSender events(x);
  control.on_started = [&](uint64_t n) { events.send({{"type", "started"}, {"command", n}}); };
  auto r = runtime_.exec(
      sandbox, *command, [&](bool is_stdout, std::string_view bytes) { events.output(is_stdout, bytes); }, stdin_fd, control);
  events.flush_output();
  end_with(x, events, r ? Result<Json>(r->to_json()) : Result<Json>(std::unexpected(r.error())));
}

// The callback backend of the tool bridge: the sandbox's tool calls as NDJSON events
// ({"type": "subscribed"} first, then {"type": "tool_call", "call_id", "cell", "helper",
// "args"}), until the client leaves; answers come by POST .../tool_calls/{call_id}.
void ApiService::tool_events(Exchange& x, const Call& c) {
  const std::string& sandbox = c.sandbox;
  EventSender events(x);
  CallControl control{x.gone_fd(), {}};
  control.on_started = [&](uint64_t) { events.send({{"type", "subscribed"}}); };
  auto r = runtime_.tool_calls(
      sandbox,
      [&](const Json& m) {
        Json e = m;
        e.erase("event");
        e["type"] = "tool_call";
        events.send(e);
        return !events.gone();
      },
      control);
  if (!r && !events.began()) return respond_error(x, r.error());
  if (!r) events.send({{"type", "error"}, {"error", error_document(r.error())["error"]}});
  x.end_stream();
}

void ApiService::answer_tool_call(Exchange& x, const Call& c) {
  auto body = body_object(x.request());
  if (!body) return respond_error(x, body.error());
  if (auto ok = only_fields(*body, {"result", "error"}); !ok) return respond_error(x, ok.error());
  auto done = runtime_.answer_tool_call(c.sandbox, std::string(c.arg), body->value("result", Json()), body->value("error", Json()));
  if (!done) return respond_error(x, done.error());
  x.respond(200, {{"accepted", true}});
}

// A hosted workbench tool's call (runtime/client/workbench_tools.h): its input is the body, its
// answer the hosted envelope, 200 whether or not the cell or command succeeded (as the
// hosted service answers a failed execution).
void ApiService::run_workbench_tool(Exchange& x, const Call& c) {
  auto body = body_object(x.request());
  if (!body) return respond_error(x, body.error());
  CallControl control{x.cancel_fd(), {}};
  auto answer = nsbox::run_workbench_tool(runtime_, c.sandbox, std::string(c.arg), *body, {}, control);
  if (!answer) return respond_error(x, answer.error());
  x.respond(200, *answer);
}

}  // namespace nsbox::api
