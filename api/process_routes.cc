// Processes that outlive a request (docs/api.md, "Processes"; runtime/supervisor/processes.h):
// POST .../processes {command|argv, env, cwd, run_as, tty, cols, rows} -> 201 {pid};
// GET .../processes; GET .../processes/{pid}/output?offset=&stderr_offset=&follow=&timeout_s=
// (NDJSON); POST .../processes/{pid}/input {data|data_b64, eof}; POST .../processes/{pid}/
// signal {signal}; DELETE .../processes/{pid}.
#include <poll.h>

#include <chrono>
#include <cstdlib>

#include "api/api_service.h"
#include "api/http_errors.h"
#include "runtime/core/signal_names.h"

namespace nsbox::api {
namespace {

constexpr uint64_t kMaxInputBytes = 1 << 20;  // per request: the supervisor holds at most that unread
constexpr uint64_t kDefaultFollowS = 300;
constexpr uint64_t kMaxFollowS = 3600;
constexpr uint64_t kPollMs = 1000;  // one wait of the supervisor's; the client's leaving is seen between them

Result<int64_t> pid_of(std::string_view text) {
  std::string digits(text);
  char* end = nullptr;
  long long pid = std::strtoll(digits.c_str(), &end, 10);
  if (digits.empty() || *end != '\0' || pid <= 0 || pid > (1 << 22))
    return fail(make_error(ErrorCode::kNotFound, "no process '" + digits.substr(0, 32) + "': a process is named by its pid"));
  return static_cast<int64_t>(pid);
}

Result<uint64_t> query_number(const HttpRequest& r, const char* key, uint64_t fallback, uint64_t max) {
  std::string text = r.query_value(key);
  if (text.empty()) return fallback;
  char* end = nullptr;
  uint64_t n = std::strtoull(text.c_str(), &end, 10);
  if (*end != '\0' || text[0] == '-' || n > max)
    return fail(make_error(ErrorCode::kMalformedRequest, std::string(key) + " must be a number from 0 to " + std::to_string(max)));
  return n;
}

Result<unsigned> dimension(const Json& body, const char* key, unsigned fallback) {
  auto it = body.find(key);
  if (it == body.end()) return fallback;
  if (!it->is_number_unsigned() || it->get<uint64_t>() == 0 || it->get<uint64_t>() > 1000)
    return fail(make_error(ErrorCode::kMalformedRequest, std::string("\"") + key + "\" must be a number from 1 to 1000"));
  return static_cast<unsigned>(it->get<uint64_t>());
}

Result<ProcessStart> start_of(const Json& body) {
  ProcessStart start;
  Json argv = NSBOX_TRY(command_argv(body));
  if (!argv.is_array() || argv.empty()) return fail(make_error(ErrorCode::kMalformedRequest, "\"argv\" must be a non-empty list of strings"));
  for (const auto& a : argv) {
    if (!a.is_string()) return fail(make_error(ErrorCode::kMalformedRequest, "every element of \"argv\" must be a string"));
    start.argv.push_back(a.get<std::string>());
  }
  if (auto e = body.find("env"); e != body.end()) {
    if (!e->is_object()) return fail(make_error(ErrorCode::kMalformedRequest, "\"env\" must be an object of strings"));
    for (const auto& [k, v] : e->items()) {
      if (!v.is_string()) return fail(make_error(ErrorCode::kMalformedRequest, "env value of " + k + " must be a string"));
      start.env.emplace_back(k, v.get<std::string>());
    }
  }
  start.cwd = NSBOX_TRY(cwd_of(body));
  start.run_as = NSBOX_TRY(run_as_of(body));
  if (auto t = body.find("tty"); t != body.end()) {
    if (!t->is_boolean()) return fail(make_error(ErrorCode::kMalformedRequest, "\"tty\" must be true or false"));
    start.tty = t->get<bool>();
  }
  start.cols = NSBOX_TRY(dimension(body, "cols", 80));
  start.rows = NSBOX_TRY(dimension(body, "rows", 24));
  return start;
}

bool client_gone(Exchange& x) {
  pollfd p = {x.gone_fd(), POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

// One stream's chunk of a read as an event ({"type": "stdout", "offset", "text"|"text_b64",
// "skipped"}); false when it held nothing. `next` moves past it.
bool stream_event(Exchange& x, const Json& read, const char* stream, uint64_t& next) {
  auto it = read.find(stream);
  if (it == read.end() || !it->is_object()) return false;
  std::string bytes = protocol::get_bytes(*it);
  uint64_t offset = it->value("offset", next);
  uint64_t skipped = it->value("skipped", uint64_t{0});
  next = offset + bytes.size();
  if (bytes.empty() && !skipped) return false;
  Json e = {{"type", stream}, {"offset", offset}};
  if (protocol::is_valid_utf8(bytes)) e["text"] = bytes;
  else e["text_b64"] = protocol::base64_encode(bytes);
  if (skipped) e["skipped"] = skipped;
  x.stream_line(e);
  return !bytes.empty();
}

}  // namespace

void ApiService::process_start(Exchange& x, const Call& c) {
  auto body = body_object(x.request());
  if (!body) return respond_error(x, body.error());
  if (auto ok = only_fields(*body, {"command", "argv", "env", "cwd", "run_as", "tty", "cols", "rows"}); !ok) return respond_error(x, ok.error());
  auto start = start_of(*body);
  if (!start) return respond_error(x, start.error());
  auto pid = runtime_.process_start(c.sandbox, *start);
  if (!pid) return respond_error(x, pid.error());
  x.respond(201, {{"pid", *pid}});
}

void ApiService::process_list(Exchange& x, const Call& c) {
  auto all = runtime_.processes(c.sandbox);
  return all ? x.respond(200, {{"processes", *all}}) : respond_error(x, all.error());
}

// The process's output from the offsets, as NDJSON: stdout/stderr events (a tty has one
// stream, "stdout"), then {"type": "end", status, exit_code, offset, stderr_offset, ...}:
// where to go on from. With follow (the default) the stream waits for more until the
// process ended and everything was sent, the client left, or timeout_s passed.
void ApiService::process_output(Exchange& x, const Call& c) {
  auto pid = pid_of(c.arg);
  if (!pid) return respond_error(x, pid.error());
  const auto& r = x.request();
  auto offset = query_number(r, "offset", 0, UINT64_MAX);
  auto stderr_offset = query_number(r, "stderr_offset", 0, UINT64_MAX);
  auto timeout_s = query_number(r, "timeout_s", kDefaultFollowS, kMaxFollowS);
  for (const auto* n : {&offset, &stderr_offset, &timeout_s})
    if (!*n) return respond_error(x, n->error());
  std::string follow_text = r.query_value("follow", "true");
  if (follow_text != "true" && follow_text != "false")
    return respond_error(x, make_error(ErrorCode::kMalformedRequest, "follow must be true or false"));
  const bool follow = follow_text == "true";
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(*timeout_s);
  ProcessRead read{*offset, *stderr_offset, 0, 0};
  for (bool began = false;; began = true) {
    auto answer = runtime_.process_read(c.sandbox, *pid, read);
    if (!answer) {
      if (!began) return respond_error(x, answer.error());
      x.stream_line({{"type", "error"}, {"error", error_document(answer.error())["error"]}});
      return x.end_stream();
    }
    bool got = stream_event(x, *answer, "stdout", read.offset);
    got = stream_event(x, *answer, "stderr", read.stderr_offset) || got;
    // An ended process's last bytes are sent before the end line.
    bool ended = answer->value("status", "") == "exited";
    if ((ended && !got) || !follow || std::chrono::steady_clock::now() >= deadline || client_gone(x)) {
      Json end = *answer;
      end.erase("stdout");
      end.erase("stderr");
      end["type"] = "end";
      end["offset"] = read.offset;
      end["stderr_offset"] = read.stderr_offset;
      x.stream_line(end);
      return x.end_stream();
    }
    read.wait_ms = got ? 0 : kPollMs;
  }
}

void ApiService::process_input(Exchange& x, const Call& c) {
  auto pid = pid_of(c.arg);
  if (!pid) return respond_error(x, pid.error());
  auto body = body_object(x.request());
  if (!body) return respond_error(x, body.error());
  if (auto ok = only_fields(*body, {"data", "data_b64", "eof"}); !ok) return respond_error(x, ok.error());
  auto data = bytes_field(*body, "data", false);
  if (!data) return respond_error(x, data.error());
  if (data->size() > kMaxInputBytes)
    return respond_error(x, make_error(ErrorCode::kLimitExceeded, "input of " + std::to_string(data->size()) + " bytes is more than the 1 MiB a request may carry",
                                       "send it in parts, as the process reads it"));
  auto eof = body->value("eof", Json(false));
  if (!eof.is_boolean()) return respond_error(x, make_error(ErrorCode::kMalformedRequest, "\"eof\" must be true or false"));
  auto done = runtime_.process_write(c.sandbox, *pid, *data, eof.get<bool>());
  return done ? x.respond(200, *done) : respond_error(x, done.error());
}

void ApiService::process_signal(Exchange& x, const Call& c) {
  auto pid = pid_of(c.arg);
  if (!pid) return respond_error(x, pid.error());
  auto body = body_object(x.request());
  if (!body) return respond_error(x, body.error());
  if (auto ok = only_fields(*body, {"signal"}); !ok) return respond_error(x, ok.error());
  auto signal = body->contains("signal") ? parse_signal((*body)["signal"]) : Result<int>(15);
  if (!signal) return respond_error(x, signal.error());
  auto done = runtime_.process_signal(c.sandbox, *pid, *signal);
  return done ? x.respond(200, *done) : respond_error(x, done.error());
}

void ApiService::process_remove(Exchange& x, const Call& c) {
  auto pid = pid_of(c.arg);
  if (!pid) return respond_error(x, pid.error());
  auto done = runtime_.process_remove(c.sandbox, *pid);
  return done ? x.respond(200, {{"removed", *pid}}) : respond_error(x, done.error());
}

}  // namespace nsbox::api
