#include "runtime/supervisor/pty_sessions.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>

namespace nsbox {
namespace {

using protocol::Json;

constexpr uint64_t kDefaultYieldMs = 250;

Error invalid(const std::string& message) { return make_error(ErrorCode::kInvalidArgument, message); }

Result<uint64_t> yield_of(const Json& r) {
  auto it = r.find("yield_ms");
  if (it == r.end()) return kDefaultYieldMs;
  if (!it->is_number_unsigned() || it->get<uint64_t>() > PtySessions::kMaxYieldMs)
    return fail(invalid("yield_ms must be a number from 0 to " + std::to_string(PtySessions::kMaxYieldMs)));
  return it->get<uint64_t>();
}

}  // namespace

void PtySessions::error(int client_fd, const Error& e) {
  Json err = {{"code", error_code_name(e.code)}, {"message", e.message}};
  if (!e.hint.empty()) err["hint"] = e.hint;
  host_.send_to_client(client_fd, {{"ok", false}, {"error", err}});
}

void PtySessions::handle(int client_fd, const std::string& op, const Json& request) {
  if (op == "pty_start") return start(client_fd, request);
  if (op == "pty_write") return exchange(client_fd, request, true);
  if (op == "pty_read") return exchange(client_fd, request, false);
  if (op == "pty_resize") return resize(client_fd, request);
  if (op == "pty_kill") return kill(client_fd, request);
  error(client_fd, make_error(ErrorCode::kMalformedRequest, "unknown PTY request '" + op + "'"));
}

void PtySessions::start(int client_fd, const Json& request) {
  std::vector<std::string> argv;
  if (auto it = request.find("argv"); it != request.end() && it->is_array())
    for (const auto& a : *it)
      if (a.is_string()) argv.push_back(a.get<std::string>());
  if (argv.empty()) return error(client_fd, invalid("a PTY session needs a command (argv)"));
  auto window = window_of(request);
  if (!window) return error(client_fd, window.error());
  EnvList env;
  if (auto it = request.find("env"); it != request.end() && it->is_object())
    for (const auto& [k, v] : it->items())
      if (v.is_string()) env.emplace_back(k, v.get<std::string>());
  if (auto checked = check_env(env); !checked) return error(client_fd, checked.error());
  if (std::none_of(env.begin(), env.end(), [](const auto& kv) { return kv.first == "TERM"; })) env.emplace_back("TERM", "xterm-256color");
  if (sessions_.size() >= kMaxSessions) prune();

  auto master = host_.open_pty_master();
  if (!master) return error(client_fd, std::move(master.error()).context("open a terminal in the sandbox"));
  auto terminal = open_terminal(std::move(*master), *window);
  if (!terminal) return error(client_fd, terminal.error());
  auto cwd = cwd_of(request);
  if (!cwd) return error(client_fd, cwd.error());
  auto run_as = run_as_of(request);
  if (!run_as) return error(client_fd, run_as.error());
  auto command = host_.spawn_on_tty({argv, env, *cwd, *run_as}, terminal->slave.get());
  if (!command) return error(client_fd, std::move(command.error()).context("start the PTY session"));

  uint64_t id = next_id_++;
  Session& s = sessions_[id];
  s.id = id;
  s.command = *command;
  s.master = std::move(terminal->master);
  s.last_used = std::chrono::steady_clock::now();
  (void)host_.loop().add(s.master.get(), EPOLLIN, [this, id](uint32_t events) { on_events(id, events); });
  host_.send_to_client(client_fd, {{"ok", true}, {"session_id", id}});
}

Result<PtySessions::Session*> PtySessions::find(const Json& request) {
  auto it = request.find("session_id");
  if (it == request.end() || !it->is_number_unsigned()) return fail(invalid("session_id must be a PTY session's number"));
  auto s = sessions_.find(it->get<uint64_t>());
  if (s == sessions_.end())
    return fail(make_error(ErrorCode::kNotFound, "no PTY session " + std::to_string(it->get<uint64_t>()) + " in this sandbox",
                           "sessions end when their command exits and is read, when killed, or when pruned (64 at most)"));
  return &s->second;
}

void PtySessions::exchange(int client_fd, const Json& request, bool writes) {
  auto found = find(request);
  if (!found) return error(client_fd, found.error());
  Session& s = **found;
  auto yield = yield_of(request);
  if (!yield) return error(client_fd, yield.error());
  s.last_used = std::chrono::steady_clock::now();
  if (writes) {
    std::string chars;
    if (auto it = request.find("chars_b64"); it != request.end() && it->is_string()) {
      auto decoded = protocol::base64_decode(it->get<std::string>());
      if (!decoded) return error(client_fd, invalid("chars_b64 is not base64"));
      chars = std::move(*decoded);
    } else if (auto it = request.find("chars"); it != request.end() && it->is_string()) {
      chars = it->get<std::string>();
    } else {
      return error(client_fd, invalid("pty_write needs chars"));
    }
    if (!s.master || s.exit_code) return error(client_fd, make_error(ErrorCode::kInvalidArgument, "PTY session " + std::to_string(s.id) + " has exited"));
    if (s.input.size() + chars.size() > kMaxInput)
      return error(client_fd, make_error(ErrorCode::kLimitExceeded, "PTY session " + std::to_string(s.id) + " has " +
                                                                      std::to_string(s.input.size()) + " bytes typed that its program has not read",
                                         "at most 1 MiB waits; read its output, or wait for it to read its input"));
    // The terminal takes what it can now; the rest waits for it (EPOLLOUT), never the
    // supervisor.
    s.input += chars;
    if (auto fed = feed(s); !fed) return error(client_fd, fed.error());
  }
  if (writes && !request.value("take_output", true)) {
    Json done = {{"ok", true}, {"session_id", s.id}, {"exit_code", s.exit_code ? Json(*s.exit_code) : Json(nullptr)}};
    return host_.send_to_client(client_fd, done);
  }
  const bool early = !writes && request.value("early", false);
  if (early) take_output(s);
  if (*yield == 0 || s.exit_code || (early && !s.output.empty())) return answer(s, client_fd);
  uint64_t id = s.id;
  auto timer = host_.loop().add_timer(*yield, [this, id, client_fd] {
    auto it = sessions_.find(id);
    if (it == sessions_.end()) return;
    auto& waiters = it->second.waiters;
    waiters.erase(std::remove_if(waiters.begin(), waiters.end(), [&](const Waiter& w) { return w.client_fd == client_fd; }), waiters.end());
    answer(it->second, client_fd);
  });
  if (!timer) return answer(s, client_fd);
  s.waiters.push_back({client_fd, *timer, early});
}

Result<void> PtySessions::feed(Session& s) {
  while (!s.input.empty() && s.master) {
    ssize_t n = ::write(s.master.get(), s.input.data(), s.input.size());
    if (n > 0) {
      s.input.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    return fail(sys_error("write to PTY session " + std::to_string(s.id)));
  }
  if (s.master) (void)host_.loop().modify(s.master.get(), s.input.empty() ? EPOLLIN : EPOLLIN | EPOLLOUT);
  return {};
}

// Unread output is kept to kMaxBuffered; trimmed only past twice that, so that a program
// printing without end costs one move per MiB, not one per read.
void PtySessions::trim(Session& s) {
  if (s.output.size() <= kMaxBuffered) return;
  size_t cut = s.output.size() - kMaxBuffered;
  s.output.erase(0, cut);
  s.dropped += cut;
}

void PtySessions::take_output(Session& s) {
  std::string chunk;
  for (int i = 0; i < 64 && host_.loop().read_chunk(s.master, chunk); ++i) {
    s.output += chunk;
    if (s.output.size() > 2 * kMaxBuffered) trim(s);
  }
}

void PtySessions::on_events(uint64_t id, uint32_t events) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  Session& s = it->second;
  if (events & EPOLLOUT) (void)feed(s);
  take_output(s);
  if (s.output.empty()) return;
  for (size_t i = 0; i < s.waiters.size(); ++i) {
    if (!s.waiters[i].early) continue;
    Waiter w = s.waiters[i];
    s.waiters.erase(s.waiters.begin() + static_cast<long>(i));
    host_.loop().cancel_timer(w.timer);
    return answer(s, w.client_fd);  // one reader takes it
  }
}

// {output | output_b64, exit_code, dropped}: what the session printed since the last
// answer. A session whose command exited is gone once its last output was read.
void PtySessions::answer(Session& s, int client_fd) {
  send_answer(s, client_fd);
  if (s.exit_code && s.waiters.empty()) end(s.id);
}

void PtySessions::send_answer(Session& s, int client_fd) {
  take_output(s);
  trim(s);
  Json reply = {{"ok", true}, {"session_id", s.id}, {"exit_code", s.exit_code ? Json(*s.exit_code) : Json(nullptr)}};
  if (protocol::is_valid_utf8(s.output)) reply["output"] = s.output;
  else reply["output_b64"] = protocol::base64_encode(s.output);
  if (s.dropped) reply["dropped"] = s.dropped;
  s.output.clear();
  s.dropped = 0;
  host_.send_to_client(client_fd, reply);
}

// Every waiter is answered (the first gets the output, all get the exit), then a
// session whose command exited is gone.
void PtySessions::answer_waiters(Session& s) {
  auto waiters = std::move(s.waiters);
  s.waiters.clear();
  for (const auto& w : waiters) {
    host_.loop().cancel_timer(w.timer);
    send_answer(s, w.client_fd);
  }
  if (s.exit_code && !waiters.empty()) end(s.id);
}

void PtySessions::client_gone(int client_fd) {
  for (auto& [id, s] : sessions_) {
    auto& waiters = s.waiters;
    for (const auto& w : waiters)
      if (w.client_fd == client_fd) host_.loop().cancel_timer(w.timer);
    waiters.erase(std::remove_if(waiters.begin(), waiters.end(), [&](const Waiter& w) { return w.client_fd == client_fd; }),
                  waiters.end());
  }
}

bool PtySessions::on_init_message(uint64_t command_id, const Json& m) {
  for (auto& [id, s] : sessions_) {
    if (s.command != command_id) continue;
    std::string event = m.value("event", "");
    if (event == "spawn_failed") {
      s.exit_code = 127;
      s.output += "nsbox: could not start the command: " + m.value("message", std::string("exec failed")) + "\r\n";
    } else if (event == "exited") {
      s.exit_code = m.contains("exit_code") ? m["exit_code"].get<int>() : 128 + m.value("signal", SIGKILL);
    } else {
      return true;
    }
    answer_waiters(s);  // an exit ends the window early
    return true;
  }
  return false;
}

void PtySessions::resize(int client_fd, const Json& request) {
  auto found = find(request);
  if (!found) return error(client_fd, found.error());
  auto window = window_of(request);
  if (!window) return error(client_fd, window.error());
  // The kernel sends SIGWINCH to the terminal's foreground process group.
  if ((*found)->master && ::ioctl((*found)->master.get(), TIOCSWINSZ, &*window) != 0)
    return error(client_fd, sys_error("resize PTY session " + std::to_string((*found)->id)));
  host_.send_to_client(client_fd, {{"ok", true}});
}

void PtySessions::kill(int client_fd, const Json& request) {
  Json killed = Json::array();
  if (request.value("all", false)) {
    for (const auto& [id, s] : sessions_) killed.push_back(id);
    kill_all();
  } else {
    auto found = find(request);
    if (!found) return error(client_fd, found.error());
    killed.push_back((*found)->id);
    end((*found)->id);
  }
  host_.send_to_client(client_fd, {{"ok", true}, {"killed", killed}});
}

// The session's processes are killed (its command's process group: what it started in
// the foreground and background alike), waiters answered, and it is forgotten.
void PtySessions::end(uint64_t id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  Session& s = it->second;
  if (!s.exit_code) host_.signal_in_sandbox(s.command, SIGKILL, true);
  if (s.master) host_.loop().remove(s.master.get());
  auto waiters = std::move(s.waiters);
  sessions_.erase(it);
  for (const auto& w : waiters) {
    host_.loop().cancel_timer(w.timer);
    host_.send_to_client(w.client_fd, {{"ok", false}, {"error", {{"code", "not_found"}, {"message", "PTY session " + std::to_string(id) + " was killed"}}}});
  }
}

void PtySessions::kill_all() {
  while (!sessions_.empty()) end(sessions_.begin()->first);
}

// Room for one more: the least recently used session that is not among the newest few.
void PtySessions::prune() {
  if (sessions_.size() <= kKeepNewest) return;
  std::vector<uint64_t> ids;
  for (const auto& [id, s] : sessions_) ids.push_back(id);  // ascending: oldest first
  ids.resize(ids.size() - kKeepNewest);
  auto victim = std::min_element(ids.begin(), ids.end(),
                                 [&](uint64_t a, uint64_t b) { return sessions_[a].last_used < sessions_[b].last_used; });
  end(*victim);
}

}  // namespace nsbox
