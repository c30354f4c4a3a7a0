// PTY sessions (docs/semantics.md, "PTY sessions"): POST .../pty {argv|command, cols,
// rows, env, cwd, run_as} -> {session_id}; POST .../pty/{pty}/input {chars|chars_b64, yield_ms};
// GET .../pty/{pty}/output?yield_ms=; POST .../pty/{pty}/resize {cols, rows};
// DELETE .../pty/{pty}; DELETE .../pty (all of them).
#include <algorithm>
#include <cstdlib>

#include "api/api_service.h"

namespace nsbox::api {
namespace {

constexpr uint64_t kMaxCells = 100000;  // columns or rows

Result<uint64_t> number_field(const Json& j, const char* key, uint64_t fallback) {
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  if (!it->is_number_unsigned()) return fail(make_error(ErrorCode::kMalformedRequest, std::string("\"") + key + "\" must be a number"));
  return it->get<uint64_t>();
}

// The {pty} of a path: a session's number (from 1); anything else names no session.
Result<uint64_t> pty_id(std::string_view text) {
  std::string digits(text);
  char* end = nullptr;
  uint64_t id = std::strtoull(digits.c_str(), &end, 10);
  if (digits.empty() || *end != '\0' || id == 0) return fail(make_error(ErrorCode::kNotFound, "no PTY session '" + digits + "'"));
  return id;
}

}  // namespace

void ApiService::pty_start(Exchange& x, const Call& c) {
  auto body = body_object(x.request());
  if (!body) return respond_error(x, body.error());
  if (auto ok = only_fields(*body, {"argv", "command", "cols", "rows", "env", "cwd", "run_as"}); !ok) return respond_error(x, ok.error());
  PtyStart start;
  if (auto it = body->find("command"); it != body->end() && it->is_string()) start.argv = {"/bin/bash", "-c", it->get<std::string>()};
  else if (auto a = body->find("argv"); a != body->end() && a->is_array())
    for (const auto& arg : *a)
      if (arg.is_string()) start.argv.push_back(arg.get<std::string>());
  if (start.argv.empty())
    return respond_error(x, make_error(ErrorCode::kMalformedRequest, "a PTY session needs \"argv\" (a list) or \"command\" (a bash line)"));
  auto cols = number_field(*body, "cols", 80), rows = number_field(*body, "rows", 24);
  if (!cols || !rows) return respond_error(x, !cols ? cols.error() : rows.error());
  start.cols = static_cast<unsigned>(std::min(*cols, kMaxCells));
  start.rows = static_cast<unsigned>(std::min(*rows, kMaxCells));
  if (auto e = body->find("env"); e != body->end() && e->is_object())
    for (const auto& [k, v] : e->items())
      if (v.is_string()) start.env.emplace_back(k, v.get<std::string>());
  auto cwd = cwd_of(*body);
  if (!cwd) return respond_error(x, cwd.error());
  start.cwd = *cwd;
  auto run_as = run_as_of(*body);
  if (!run_as) return respond_error(x, run_as.error());
  start.run_as = *run_as;
  auto sid = runtime_.pty_start(c.sandbox, start);
  if (!sid) return respond_error(x, sid.error());
  x.respond(201, {{"session_id", *sid}});
}

void ApiService::pty_kill_all(Exchange& x, const Call& c) {
  auto killed = runtime_.pty_kill(c.sandbox, 0);
  return killed ? x.respond(200, {{"killed", *killed}}) : respond_error(x, killed.error());
}

void ApiService::pty_kill(Exchange& x, const Call& c) {
  auto id = pty_id(c.arg);
  if (!id) return respond_error(x, id.error());
  auto killed = runtime_.pty_kill(c.sandbox, *id);
  return killed ? x.respond(200, {{"killed", *killed}}) : respond_error(x, killed.error());
}

void ApiService::pty_output(Exchange& x, const Call& c) {
  auto id = pty_id(c.arg);
  if (!id) return respond_error(x, id.error());
  std::string text = x.request().query_value("yield_ms", "250");
  char* stop = nullptr;
  uint64_t yield = std::strtoull(text.c_str(), &stop, 10);
  if (text.empty() || *stop != '\0') return respond_error(x, make_error(ErrorCode::kMalformedRequest, "yield_ms must be a number"));
  auto o = runtime_.pty_read(c.sandbox, *id, yield);
  return o ? x.respond(200, o->to_json()) : respond_error(x, o.error());
}

void ApiService::pty_input(Exchange& x, const Call& c) {
  auto id = pty_id(c.arg);
  if (!id) return respond_error(x, id.error());
  auto body = body_object(x.request());
  if (!body) return respond_error(x, body.error());
  if (auto ok = only_fields(*body, {"chars", "chars_b64", "yield_ms"}); !ok) return respond_error(x, ok.error());
  std::string chars;
  if (auto it = body->find("chars_b64"); it != body->end() && it->is_string()) {
    auto decoded = protocol::base64_decode(it->get<std::string>());
    if (!decoded) return respond_error(x, make_error(ErrorCode::kMalformedRequest, "\"chars_b64\" is not base64"));
    chars = std::move(*decoded);
  } else if (auto t = body->find("chars"); t != body->end() && t->is_string()) {
    chars = t->get<std::string>();
  } else {
    return respond_error(x, make_error(ErrorCode::kMalformedRequest, "input needs \"chars\" (text) or \"chars_b64\""));
  }
  auto yield = number_field(*body, "yield_ms", 250);
  if (!yield) return respond_error(x, yield.error());
  auto o = runtime_.pty_write(c.sandbox, *id, chars, *yield);
  return o ? x.respond(200, o->to_json()) : respond_error(x, o.error());
}

void ApiService::pty_resize(Exchange& x, const Call& c) {
  auto id = pty_id(c.arg);
  if (!id) return respond_error(x, id.error());
  auto body = body_object(x.request());
  if (!body) return respond_error(x, body.error());
  auto cols = number_field(*body, "cols", 80), rows = number_field(*body, "rows", 24);
  if (!cols || !rows) return respond_error(x, !cols ? cols.error() : rows.error());
  auto done = runtime_.pty_resize(c.sandbox, *id, static_cast<unsigned>(std::min(*cols, kMaxCells)),
                                  static_cast<unsigned>(std::min(*rows, kMaxCells)));
  return done ? x.respond(200, {{"resized", true}}) : respond_error(x, done.error());
}

}  // namespace nsbox::api
