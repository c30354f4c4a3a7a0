// Processes: starting, listing, signals, removal, and init's news. Their input and output
// are in process_io.cc, PTY sessions' windows in process_pty.cc.
#include "runtime/supervisor/processes.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "isolation/sys/rfc3339.h"
#include "runtime/core/signal_names.h"

namespace nsbox {
namespace {

using protocol::Json;

Error invalid(const std::string& message) { return make_error(ErrorCode::kInvalidArgument, message); }

Result<std::vector<std::string>> argv_of(const Json& request) {
  std::vector<std::string> argv;
  auto it = request.find("argv");
  if (it == request.end() || !it->is_array() || it->empty()) return fail(invalid("a process needs a command (a non-empty \"argv\")"));
  for (const auto& a : *it) {
    if (!a.is_string() || !protocol::is_valid_utf8(a.get<std::string>())) return fail(invalid("every element of \"argv\" must be UTF-8 text"));
    argv.push_back(a.get<std::string>());
  }
  if (argv[0].empty()) return fail(invalid("the command name is empty"));
  return argv;
}

Result<EnvList> env_of(const Json& request) {
  EnvList env;
  auto it = request.find("env");
  if (it == request.end() || it->is_null()) return env;
  if (!it->is_object()) return fail(invalid("\"env\" must be an object of strings"));
  for (const auto& [k, v] : it->items()) {
    if (!v.is_string()) return fail(invalid("env value of " + k + " must be a string"));
    env.emplace_back(k, v.get<std::string>());
  }
  NSBOX_CHECK(check_env(env));
  return env;
}

UniqueFd nonblocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return UniqueFd(fd);
}

}  // namespace

void Processes::error(int client_fd, const Error& e) {
  Json err = {{"code", error_code_name(e.code)}, {"message", e.message}};
  if (!e.hint.empty()) err["hint"] = e.hint;
  host_.send_to_client(client_fd, {{"ok", false}, {"error", err}});
}

void Processes::handle(int client_fd, const std::string& op, const Json& request) {
  if (op.starts_with("pty_")) return handle_pty(client_fd, op, request);
  if (op == "proc_start") return start(client_fd, request, false);
  if (op == "proc_list") return list(client_fd);
  if (op == "proc_read") return read(client_fd, request);
  if (op == "proc_write") return write(client_fd, request);
  if (op == "proc_signal") return signal(client_fd, request);
  if (op == "proc_remove") return remove(client_fd, request);
  if (op == "proc_resize") return resize(client_fd, request, false);
  error(client_fd, make_error(ErrorCode::kMalformedRequest, "unknown process request '" + op + "'"));
}

void Processes::start(int client_fd, const Json& request, bool session) {
  auto argv = argv_of(request);
  if (!argv) return error(client_fd, argv.error());
  auto env = env_of(request);
  if (!env) return error(client_fd, env.error());
  auto cwd = cwd_of(request);
  if (!cwd) return error(client_fd, cwd.error());
  auto run_as = run_as_of(request);
  if (!run_as) return error(client_fd, run_as.error());
  if (auto known = host_.check_account(*run_as); !known) return error(client_fd, known.error());
  const bool tty = request.value("tty", false);
  auto window = tty ? window_of(request) : Result<winsize>(winsize{});
  if (!window) return error(client_fd, window.error());
  // Only a request that can start prunes a session for its place.
  if (processes_.size() >= kMaxProcesses && !(session && prune_session()))
    return error(client_fd, make_error(ErrorCode::kBusy, "this sandbox has " + std::to_string(processes_.size()) +
                                                             " processes, the limit of " + std::to_string(kMaxProcesses),
                                       "remove ended ones (DELETE .../processes/{pid}, `nsbox kill ID PID`): their status is kept until then"));
  Process p;
  p.run_as = *run_as;
  p.session = session;
  p.last_used = std::chrono::steady_clock::now();
  p.tty = tty;
  p.argv = std::move(*argv);
  p.cwd = host_.working_dir(*cwd);
  if (p.tty && std::none_of(env->begin(), env->end(), [](const auto& kv) { return kv.first == "TERM"; }))
    env->emplace_back("TERM", "xterm-256color");
  UniqueFd in_r, out_w, err_w, slave;
  Result<uint64_t> command = 0;
  if (p.tty) {
    auto master = host_.open_pty_master();
    if (!master) return error(client_fd, std::move(master.error()).context("open a terminal in the sandbox"));
    auto terminal = open_terminal(std::move(*master), *window);
    if (!terminal) return error(client_fd, terminal.error());
    p.master = std::move(terminal->master);
    command = host_.spawn_on_tty({p.argv, *env, p.cwd, p.run_as}, terminal->slave.get());
  } else {
    int in[2], out[2], err[2];
    if (::pipe2(in, O_CLOEXEC) != 0) return error(client_fd, sys_error("pipe2 for a process's stdin"));
    in_r = UniqueFd(in[0]);
    p.stdin_w = nonblocking(in[1]);
    if (::pipe2(out, O_CLOEXEC) != 0) return error(client_fd, sys_error("pipe2 for a process's stdout"));
    p.out_r = nonblocking(out[0]);
    out_w = UniqueFd(out[1]);
    if (::pipe2(err, O_CLOEXEC) != 0) return error(client_fd, sys_error("pipe2 for a process's stderr"));
    p.err_r = nonblocking(err[0]);
    err_w = UniqueFd(err[1]);
    command = host_.spawn_with_stdio({p.argv, *env, p.cwd, p.run_as}, in_r.get(), out_w.get(), err_w.get());
  }
  if (!command) return error(client_fd, std::move(command.error()).context("start the process"));
  p.command = *command;
  p.starter = client_fd;
  p.started_at = sys::now_rfc3339();
  std::string prefix = std::string(kOutputDir) + "/process-" + std::to_string(p.command);
  p.out = std::make_unique<StreamLog>(host_.files_volume(), prefix + (p.tty ? "-tty.txt" : "-stdout.txt"));
  p.err = std::make_unique<StreamLog>(host_.files_volume(), prefix + "-stderr.txt");
  uint64_t id = p.command;
  Process& kept = processes_[id] = std::move(p);
  if (kept.tty) (void)host_.loop().add(kept.master.get(), EPOLLIN, [this, id](uint32_t events) {
    auto it = processes_.find(id);
    if (it != processes_.end() && (events & EPOLLOUT)) (void)feed(it->second);
    on_readable(id, true);
  });
  else {
    (void)host_.loop().add(kept.out_r.get(), EPOLLIN, [this, id](uint32_t) { on_readable(id, true); });
    (void)host_.loop().add(kept.err_r.get(), EPOLLIN, [this, id](uint32_t) { on_readable(id, false); });
  }
}

Json Processes::status(const Process& p) const {
  Json j = {{"pid", p.pid},
            {"argv", p.argv},
            {"cwd", p.cwd},
            {"tty", p.tty},
            {"status", p.exit_code ? "exited" : "running"},
            {"exit_code", p.exit_code ? Json(*p.exit_code) : Json(nullptr)},
            {"signal", p.signal ? Json(signal_name(*p.signal)) : Json(nullptr)},
            {"started_at", p.started_at},
            {"stdout_bytes", p.out->end()}};
  if (!p.tty) j["stderr_bytes"] = p.err->end();
  if (!p.run_as.empty()) j["run_as"] = p.run_as;
  if (auto path = p.out->file_path(); !path.empty()) j["stdout_file_path"] = path;
  if (auto path = p.err->file_path(); !path.empty()) j["stderr_file_path"] = path;
  return j;
}

void Processes::list(int client_fd) {
  Json all = Json::array();
  for (const auto& [id, p] : processes_)
    if (p.pid) all.push_back(status(p));
  host_.send_to_client(client_fd, {{"ok", true}, {"processes", all}});
}

Result<Processes::Process*> Processes::find(const Json& request) {
  auto it = request.find("pid");
  if (it == request.end() || !it->is_number_unsigned()) return fail(invalid("\"pid\" must be a process's pid in the sandbox"));
  uint64_t pid = it->get<uint64_t>();
  for (auto& [id, p] : processes_)
    if (p.pid && static_cast<uint64_t>(p.pid) == pid) return &p;
  return fail(make_error(ErrorCode::kNotFound, "no process " + std::to_string(pid) + " in this sandbox",
                         "list them with GET .../processes (`nsbox ps ID`); a removed process is gone"));
}

void Processes::signal(int client_fd, const Json& request) {
  auto found = find(request);
  if (!found) return error(client_fd, found.error());
  auto it = request.find("signal");
  auto number = it == request.end() ? Result<int>(SIGTERM) : parse_signal(*it);
  if (!number) return error(client_fd, number.error());
  if ((*found)->exit_code)
    return error(client_fd, make_error(ErrorCode::kInvalidArgument, "process " + std::to_string((*found)->pid) + " has exited"));
  host_.signal_in_sandbox((*found)->command, *number, true);
  host_.send_to_client(client_fd, {{"ok", true}, {"pid", (*found)->pid}, {"signal", signal_name(*number)}});
}

void Processes::remove(int client_fd, const Json& request) {
  auto found = find(request);
  if (!found) return error(client_fd, found.error());
  pid_t pid = (*found)->pid;
  forget((*found)->command);
  host_.send_to_client(client_fd, {{"ok", true}, {"removed", pid}});
}

void Processes::resize(int client_fd, const Json& request, bool session) {
  auto found = session ? find_session(request) : find(request);
  if (!found) return error(client_fd, found.error());
  Process& p = **found;
  if (!p.tty) return error(client_fd, invalid("process " + std::to_string(p.pid) + " has no terminal"));
  auto window = window_of(request);
  if (!window) return error(client_fd, window.error());
  // The kernel sends SIGWINCH to the terminal's foreground process group.
  if (p.master && ::ioctl(p.master.get(), TIOCSWINSZ, &*window) != 0)
    return error(client_fd, sys_error("resize the terminal of process " + std::to_string(p.pid)));
  host_.send_to_client(client_fd, {{"ok", true}, {session ? "session_id" : "pid", p.pid}});
}

// Killed if it runs (its whole process group: what it started, too), its waiters told,
// its descriptors closed, and forgotten.
void Processes::forget(uint64_t command) {
  auto it = processes_.find(command);
  if (it == processes_.end()) return;
  Process& p = it->second;
  if (!p.exit_code) host_.signal_in_sandbox(p.command, SIGKILL, true);
  for (UniqueFd* fd : {&p.master, &p.stdin_w, &p.out_r, &p.err_r})
    if (*fd) host_.loop().remove(fd->get());
  for (auto* log : {p.out.get(), p.err.get()})
    if (log) log->remove_file();
  auto waiters = std::move(p.waiters);
  auto windows = std::move(p.windows);
  int starter = p.starter;
  pid_t pid = p.pid;
  bool session = p.session;
  processes_.erase(it);
  Error gone = make_error(ErrorCode::kNotFound, (session ? "PTY session " : "process ") + std::to_string(pid) +
                                                    (session ? " was killed" : " was removed"));
  for (const auto& w : waiters) {
    host_.loop().cancel_timer(w.timer);
    error(w.client_fd, gone);
  }
  for (const auto& w : windows) {
    host_.loop().cancel_timer(w.timer);
    error(w.client_fd, gone);
  }
  if (starter >= 0) error(starter, gone);
}

void Processes::kill_all() {
  while (!processes_.empty()) forget(processes_.begin()->first);
}

void Processes::client_gone(int client_fd) {
  for (auto& [id, p] : processes_) {
    if (p.starter == client_fd) p.starter = -1;
    auto& w = p.waiters;
    for (const auto& one : w)
      if (one.client_fd == client_fd) host_.loop().cancel_timer(one.timer);
    w.erase(std::remove_if(w.begin(), w.end(), [&](const Waiter& one) { return one.client_fd == client_fd; }), w.end());
    auto& windows = p.windows;
    for (const auto& one : windows)
      if (one.client_fd == client_fd) host_.loop().cancel_timer(one.timer);
    windows.erase(std::remove_if(windows.begin(), windows.end(), [&](const WindowWaiter& one) { return one.client_fd == client_fd; }),
                  windows.end());
  }
}

// init runs inside the sandbox: its numbers are read with defaults, never trusted to be there.
bool Processes::on_init_message(uint64_t command_id, const Json& m) {
  auto it = processes_.find(command_id);
  if (it == processes_.end()) return false;
  Process& p = it->second;
  std::string event = m.value("event", "");
  if (event == "started") {
    p.pid = m.value("pid", 0);
    // A pid names one process: an ended one's record with the same pid (the pid was
    // reused) goes, so that no call meant for this one reaches it.
    std::vector<uint64_t> stale;
    for (const auto& [other, q] : processes_)
      if (other != command_id && q.pid == p.pid && q.exit_code) stale.push_back(other);
    for (uint64_t other : stale) forget(other);
    if (p.starter >= 0) host_.send_to_client(p.starter, {{"ok", true}, {p.session ? "session_id" : "pid", p.pid}});
    p.starter = -1;
  } else if (event == "spawn_failed") {
    int starter = std::exchange(p.starter, -1);
    std::string what = "could not start '" + p.argv[0] + "': " + m.value("message", std::string("exec failed"));
    forget(command_id);
    if (starter >= 0)
      error(starter, make_error(ErrorCode::kInvalidArgument, what,
                                "the command must exist in the sandbox (a name on PATH or an absolute path) and cwd must be a directory"));
  } else if (event == "exited") {
    if (auto code = m.find("exit_code"); code != m.end() && code->is_number_integer()) p.exit_code = code->get<int>();
    if (auto sig = m.find("signal"); sig != m.end() && sig->is_number_integer()) {
      p.signal = sig->get<int>();
      p.exit_code = 128 + *p.signal;
    }
    if (!p.exit_code) p.exit_code = 255;
    take_output(p, 64);  // what it wrote before it exited
    answer_waiters(p, true);
    answer_windows(p, true);  // may end a session whose output was all read
  }
  return true;
}

}  // namespace nsbox
