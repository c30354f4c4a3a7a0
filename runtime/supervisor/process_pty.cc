// PTY sessions (docs/semantics.md, "PTY sessions"): processes with a terminal, named by
// their pid like any other, that an agent types into and reads in windows of time. Each
// answer holds what the terminal printed since the last one (the newest kMaxWindowBytes of
// it; the rest is counted as dropped). Ctrl-C is the byte 0x03: the terminal's line
// discipline turns it into SIGINT for the foreground process group, as on any terminal.
#include <algorithm>
#include <chrono>

#include "runtime/supervisor/processes.h"

namespace nsbox {
namespace {

using protocol::Json;

constexpr uint64_t kDefaultYieldMs = 250;

Error invalid(const std::string& message) { return make_error(ErrorCode::kInvalidArgument, message); }

Result<uint64_t> yield_of(const Json& r) {
  auto it = r.find("yield_ms");
  if (it == r.end()) return kDefaultYieldMs;
  if (!it->is_number_unsigned() || it->get<uint64_t>() > Processes::kMaxYieldMs)
    return fail(invalid("yield_ms must be a number from 0 to " + std::to_string(Processes::kMaxYieldMs)));
  return it->get<uint64_t>();
}

Result<std::string> typed(const Json& request) {
  if (auto it = request.find("chars_b64"); it != request.end() && it->is_string()) {
    auto decoded = protocol::base64_decode(it->get<std::string>());
    if (!decoded) return fail(invalid("chars_b64 is not base64"));
    return std::move(*decoded);
  }
  if (auto it = request.find("chars"); it != request.end() && it->is_string()) return it->get<std::string>();
  return fail(invalid("pty_write needs chars"));
}

}  // namespace

void Processes::handle_pty(int client_fd, const std::string& op, const Json& request) {
  if (op == "pty_start") {
    Json process = request;  // argv, env, cwd, run_as, cols and rows, as a process's
    process["tty"] = true;
    return start(client_fd, process, /*session=*/true);
  }
  if (op == "pty_write") return exchange(client_fd, request, true);
  if (op == "pty_read") return exchange(client_fd, request, false);
  if (op == "pty_resize") return resize(client_fd, request, true);
  if (op == "pty_kill") return kill_sessions(client_fd, request);
  error(client_fd, make_error(ErrorCode::kMalformedRequest, "unknown PTY request '" + op + "'"));
}

Result<Processes::Process*> Processes::find_session(const Json& request) {
  auto it = request.find("session_id");
  if (it == request.end() || !it->is_number_unsigned()) return fail(invalid("session_id must be a PTY session's number"));
  uint64_t id = it->get<uint64_t>();
  for (auto& [command, p] : processes_)
    if (p.session && p.pid && static_cast<uint64_t>(p.pid) == id) return &p;
  return fail(make_error(ErrorCode::kNotFound, "no PTY session " + std::to_string(id) + " in this sandbox",
                         "sessions end when their command exits and is read, when killed, or when pruned (at 64 processes, "
                         "the least recently used beyond the 8 newest)"));
}

void Processes::exchange(int client_fd, const Json& request, bool writes) {
  auto found = find_session(request);
  if (!found) return error(client_fd, found.error());
  Process& p = **found;
  auto yield = yield_of(request);
  if (!yield) return error(client_fd, yield.error());
  p.last_used = std::chrono::steady_clock::now();
  if (writes) {
    auto chars = typed(request);
    if (!chars) return error(client_fd, chars.error());
    if (!p.master || p.exit_code) return error(client_fd, invalid("PTY session " + std::to_string(p.pid) + " has exited"));
    if (p.input.size() + chars->size() > kMaxPendingInput)
      return error(client_fd, make_error(ErrorCode::kLimitExceeded, "PTY session " + std::to_string(p.pid) + " has " +
                                                                       std::to_string(p.input.size()) + " bytes typed that its program has not read",
                                         "at most 1 MiB waits; read its output, or wait for it to read its input"));
    // The terminal takes what it can now; the rest waits for it (EPOLLOUT), never the
    // supervisor.
    p.input += *chars;
    if (auto fed = feed(p); !fed) return error(client_fd, fed.error());
  }
  if (writes && !request.value("take_output", true))
    return host_.send_to_client(client_fd, {{"ok", true}, {"session_id", p.pid}, {"exit_code", p.exit_code ? Json(*p.exit_code) : Json(nullptr)}});
  const bool early = !writes && request.value("early", false);
  if (early) take_output(p, 64);
  // Bounded as a process's readers: past kMaxWaiters, an answer comes at once.
  if (*yield == 0 || p.exit_code || (early && p.out->end() > p.seen) || p.windows.size() >= kMaxWaiters)
    return answer_window(p, client_fd);
  uint64_t command = p.command;
  auto timer = host_.loop().add_timer(*yield, [this, command, client_fd] {
    auto it = processes_.find(command);
    if (it == processes_.end()) return;
    auto& windows = it->second.windows;
    windows.erase(std::remove_if(windows.begin(), windows.end(), [&](const WindowWaiter& w) { return w.client_fd == client_fd; }),
                  windows.end());
    answer_window(it->second, client_fd);
  });
  if (!timer) return answer_window(p, client_fd);
  p.windows.push_back({client_fd, *timer, early});
}

// {output | output_b64, exit_code, dropped}: what the session printed since the last
// answer.
void Processes::send_window(Process& p, int client_fd) {
  take_output(p, 64);
  const uint64_t end = p.out->end();
  const uint64_t from = end - p.seen > kMaxWindowBytes ? end - kMaxWindowBytes : p.seen;
  auto chunk = p.out->read(from, kMaxWindowBytes);
  const uint64_t dropped = (from - p.seen) + chunk.skipped;
  p.seen = chunk.offset + chunk.bytes.size();
  Json reply = {{"ok", true}, {"session_id", p.pid}, {"exit_code", p.exit_code ? Json(*p.exit_code) : Json(nullptr)}};
  if (protocol::is_valid_utf8(chunk.bytes)) reply["output"] = std::move(chunk.bytes);
  else reply["output_b64"] = protocol::base64_encode(chunk.bytes);
  if (dropped) reply["dropped"] = dropped;
  host_.send_to_client(client_fd, reply);
}

// Then a session whose command exited, and all of whose output was read, is gone.
void Processes::answer_window(Process& p, int client_fd) {
  send_window(p, client_fd);
  end_if_read(p.command);
}

// Output came (`all` false): the first reader waiting early for it takes it. The command
// exited (`all`): every waiter is answered (the first gets the output, all the exit).
void Processes::answer_windows(Process& p, bool all) {
  if (!p.session) return;
  if (!all) {
    if (p.out->end() <= p.seen) return;
    auto w = std::find_if(p.windows.begin(), p.windows.end(), [](const WindowWaiter& one) { return one.early; });
    if (w == p.windows.end()) return;
    WindowWaiter taken = *w;
    p.windows.erase(w);
    host_.loop().cancel_timer(taken.timer);
    return answer_window(p, taken.client_fd);
  }
  auto windows = std::move(p.windows);
  p.windows.clear();
  for (const auto& w : windows) {
    host_.loop().cancel_timer(w.timer);
    send_window(p, w.client_fd);
  }
  if (!windows.empty()) end_if_read(p.command);
}

void Processes::end_if_read(uint64_t command) {
  auto it = processes_.find(command);
  if (it == processes_.end()) return;
  const Process& p = it->second;
  if (p.session && p.exit_code && p.windows.empty() && p.seen >= p.out->end()) forget(command);
}

void Processes::kill_sessions(int client_fd, const Json& request) {
  Json killed = Json::array();
  std::vector<uint64_t> ending;
  if (request.value("all", false)) {
    for (const auto& [command, p] : processes_)
      if (p.session && p.pid) {
        killed.push_back(p.pid);
        ending.push_back(command);
      }
  } else {
    auto found = find_session(request);
    if (!found) return error(client_fd, found.error());
    killed.push_back((*found)->pid);
    ending.push_back((*found)->command);
  }
  for (uint64_t command : ending) forget(command);
  host_.send_to_client(client_fd, {{"ok", true}, {"killed", killed}});
}

// Room for one more: the least recently used session that is not among the newest few.
bool Processes::prune_session() {
  std::vector<uint64_t> sessions;  // by command id: oldest first
  for (const auto& [command, p] : processes_)
    if (p.session) sessions.push_back(command);
  if (sessions.size() <= kKeepNewestSessions) return false;
  sessions.resize(sessions.size() - kKeepNewestSessions);
  auto victim = std::min_element(sessions.begin(), sessions.end(), [&](uint64_t a, uint64_t b) {
    return processes_.at(a).last_used < processes_.at(b).last_used;
  });
  forget(*victim);
  return true;
}

}  // namespace nsbox
