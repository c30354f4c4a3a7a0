#include "runtime/supervisor/kernel_session.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>

#include "isolation/sys/log.h"
#include "runtime/supervisor/kernel_messages.h"

namespace nsbox {
namespace {

using protocol::Json;
using Clock = std::chrono::steady_clock;

constexpr size_t kReadChunk = 64u << 10;
constexpr size_t kDrainLimit = 256u << 10;
constexpr size_t kStrayLimit = 64u << 10;
constexpr int kMaxFailedStarts = 3;

const std::vector<std::string> kKernelArgv = {"/opt/nsbox/nsbox-kernel", "--python-path", "/opt/nsbox/python",
                                              "--control-fd", "3"};

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

Error kernel_error(const std::string& what) {
  return make_error(ErrorCode::kInternal, what, "see the sandbox's supervisor.log; `nsbox restart` starts a fresh kernel");
}

}  // namespace

Result<CellRequest> CellRequest::from_json(const Json& j) {
  CellRequest r;
  auto bad = [](std::string m) { return fail(make_error(ErrorCode::kInvalidArgument, std::move(m))); };
  if (auto code = j.find("code"); code != j.end()) {
    if (!code->is_string()) return bad("\"code\" must be a string");
    r.code = code->get<std::string>();
  } else if (auto b64 = j.find("code_b64"); b64 != j.end() && b64->is_string()) {
    r.code = NSBOX_TRY(protocol::base64_decode(b64->get<std::string>()));
  } else {
    return bad("execute needs \"code\" (or \"code_b64\")");
  }
  if (auto t = j.find("timeout_s"); t != j.end()) {
    if (!t->is_number() || !(t->get<double>() > 0) || t->get<double>() > 86400 || std::isnan(t->get<double>()))
      return bad("\"timeout_s\" must be a number of seconds in (0, 86400]");
    r.timeout_s = t->get<double>();
  }
  if (auto l = j.find("output_limit"); l != j.end()) {
    if (!l->is_number_unsigned() || l->get<uint64_t>() > (64u << 20)) return bad("\"output_limit\" must be bytes, at most 64 MiB");
    r.output_limit = l->get<size_t>();
  }
  if (auto d = j.find("output_dir"); d != j.end()) {
    auto dir = parse_output_dir(*d);
    if (!dir) return bad(dir.error().message);
    r.output_dir = *dir;
  }
  if (auto s = j.find("stream"); s != j.end() && s->is_boolean()) r.stream = s->get<bool>();
  return r;
}

void KernelSession::start() {
  if (state_ != State::kStopped || shutting_down_) return;
  if (!options_.unavailable.empty()) {
    fail_queued(make_error(ErrorCode::kUnsupported, options_.unavailable, "run commands there (nsbox sh, commands.run)"));
    return;
  }
  int pair[2], out[2], err[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0 || ::pipe2(out, O_CLOEXEC) != 0 ||
      ::pipe2(err, O_CLOEXEC) != 0) {
    fail_queued(sys_error("start the Python kernel: socketpair/pipe2"));
    return;
  }
  UniqueFd theirs(pair[1]), out_w(out[1]), err_w(err[1]);
  control_.reset(pair[0]);
  out_.reset(out[0]);
  err_.reset(err[0]);
  for (int fd : {control_.get(), out_.get(), err_.get()}) ::fcntl(fd, F_SETFL, O_NONBLOCK);
  std::vector<std::string> argv = kKernelArgv;
  if (!options_.preload.empty()) {
    std::string list;
    for (const auto& name : options_.preload) list += (list.empty() ? "" : ",") + name;
    argv.insert(argv.end(), {"--preload", list});
  }
  if (options_.merge) argv.push_back("--merge");
  auto id = host_.spawn_kernel(argv, {{"stdout", out_w.get()}, {"stderr", err_w.get()}, {"fd3", theirs.get()}});
  if (!id) {
    close_kernel_fds();
    fail_queued(std::move(id.error()).context("start the Python kernel"));
    return;
  }
  command_id_ = *id;
  reader_ = protocol::FrameReader(protocol::kMaxClientFrame, protocol::kUntrustedJson);
  to_kernel_.clear();
  to_kernel_sent_ = 0;
  execute_bytes_ = 0;
  bad_frames_ = 0;
  reading_paused_ = false;
  (void)host_.loop().add(control_.get(), EPOLLIN, [this](uint32_t events) { on_control_event(events); });
  (void)host_.loop().add(out_.get(), EPOLLIN, [this](uint32_t) { on_output(true); });
  (void)host_.loop().add(err_.get(), EPOLLIN, [this](uint32_t) { on_output(false); });
  state_ = State::kStarting;
}

void KernelSession::configure(const EnvList& env) {
  Json vars = Json::object();
  for (const auto& [k, v] : env) vars[k] = v;
  // Before the kernel is ready this waits in its channel, ahead of every cell.
  if (control_) (void)send_to_kernel({{"op", "configure"}, {"env", vars}});
}

void KernelSession::submit(int client_fd, CellRequest request) {
  auto cell = std::make_unique<Cell>();
  cell->client = client_fd;
  cell->request = std::move(request);
  queue_.push_back(std::move(cell));
  if (state_ == State::kStopped && !shutting_down_) {
    failed_starts_ = 0;  // a new cell is worth a new attempt
    start();
  }
  dispatch();
}

void KernelSession::dispatch() {
  // Not to a kernel that is being replaced: the fresh one takes the queue when ready.
  if (state_ != State::kIdle || restart_wanted_ || queue_.empty()) return;
  running_ = std::move(queue_.front());
  queue_.pop_front();
  Cell& c = *running_;
  c.number = next_cell_++;
  FilesVolume* volume = host_.files_volume();
  std::string prefix = "cell-" + std::to_string(c.number);
  c.out = std::make_unique<OutputCapture>(c.request.output_limit, volume, c.request.output_dir, prefix + "-stdout.txt");
  c.err = std::make_unique<OutputCapture>(c.request.output_limit, volume, c.request.output_dir, prefix + "-stderr.txt");
  c.out->append(stray_out_);
  c.err->append(stray_err_);
  stray_out_.clear();
  stray_err_.clear();
  c.started = Clock::now();
  c.oom_before = host_.oom_kills();
  Json execute = {{"op", "execute"}, {"cell", c.number}, {"output_dir", FilesVolume::inside_path(c.request.output_dir)}, {"results_limit", c.request.output_limit}};
  if (protocol::is_valid_utf8(c.request.code)) execute["code"] = c.request.code;
  else execute["code_b64"] = protocol::base64_encode(c.request.code);
  size_t before = pending_to_kernel();
  if (!send_to_kernel(execute)) {
    Json r = base_result(c);
    r["status"] = "error";
    r["message"] = "could not send the cell to the kernel: its channel is closed";
    finish(std::move(r));
    kill_kernel();
    return;
  }
  execute_bytes_ = pending_to_kernel() - before;  // a large cell is not an answer backlog
  state_ = State::kBusy;
  refresh_pause();
  auto timer = host_.loop().add_timer(static_cast<uint64_t>(c.request.timeout_s * 1000), [this] { on_deadline(); });
  c.timer = timer ? *timer : -1;
  // Only a streaming caller shows it; to another it would be one more wakeup per cell.
  if (c.request.stream) host_.send_to_client(c.client, {{"event", "started"}, {"cell", c.number}});
}

void KernelSession::on_control_event(uint32_t events) {
  if (events & EPOLLOUT) flush_to_kernel();
  if (control_ && (events & (EPOLLIN | EPOLLHUP | EPOLLERR))) on_kernel_messages();
}

void KernelSession::on_kernel_messages() {
  auto status = reader_.read_available(control_.get());
  // The kernel runs user code: its messages are untrusted, like a client's.
  bad_frames_ += protocol::dispatch_untrusted(reader_, "the kernel", [this](const Json& m) { on_kernel_message(m); });
  if (bad_frames_ > kMaxBadFrames && control_)
    return kill_for_abuse("its channel carried " + std::to_string(bad_frames_) +
                          " malformed messages (something in the cell wrote to the kernel's fd 3)");
  if ((!status || *status == protocol::FrameReader::Status::kClosed) && control_) {
    host_.loop().remove(control_.get());  // its exit, reported by init, does the rest
    control_.reset();
  }
}

// Answers and cells wait in to_kernel_ while the channel is full; the event loop writes
// them when it has room (EPOLLOUT), never blocking.
bool KernelSession::send_to_kernel(const Json& message) {
  if (!control_) return false;
  to_kernel_ += protocol::encode(message);
  flush_to_kernel();
  return true;
}

void KernelSession::flush_to_kernel() {
  while (control_ && to_kernel_sent_ < to_kernel_.size()) {
    ssize_t n = ::send(control_.get(), to_kernel_.data() + to_kernel_sent_, to_kernel_.size() - to_kernel_sent_,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n < 0) {  // the kernel is gone; init reports its exit
      to_kernel_.clear();
      to_kernel_sent_ = 0;
      break;
    }
    to_kernel_sent_ += static_cast<size_t>(n);
  }
  if (to_kernel_sent_ == to_kernel_.size()) {
    to_kernel_.clear();
    to_kernel_sent_ = 0;
    execute_bytes_ = 0;
  } else if (to_kernel_sent_ > (1u << 20) && to_kernel_sent_ > to_kernel_.size() / 2) {
    to_kernel_.erase(0, to_kernel_sent_);  // amortised: the copy is at most what was sent
    to_kernel_sent_ = 0;
  }
  update_interest();
}

void KernelSession::answer_kernel(const Json& message) {
  if (!send_to_kernel(message)) return;
  if (pending_to_kernel() > kMaxAnswerBacklog + execute_bytes_)
    kill_for_abuse("it stopped reading its channel while requests kept coming (" +
                   std::to_string(pending_to_kernel()) + " bytes of answers waiting)");
}

size_t KernelSession::pending_to_kernel() const { return to_kernel_.size() - to_kernel_sent_; }

// What the loop watches: nothing to read while the running cell's client is backlogged
// (the kernel then blocks on its full pipes and channel: backpressure up to the cell),
// and room to write while answers wait.
void KernelSession::update_interest() {
  uint32_t in = reading_paused_ ? 0 : uint32_t{EPOLLIN};
  if (control_) (void)host_.loop().modify(control_.get(), in | (pending_to_kernel() ? uint32_t{EPOLLOUT} : 0));
  for (UniqueFd* fd : {&out_, &err_})
    if (*fd) (void)host_.loop().modify(fd->get(), in);
}

void KernelSession::refresh_pause() {
  bool paused = running_ && running_->client >= 0 && running_->request.stream && host_.client_backlogged(running_->client);
  if (paused == reading_paused_) return;
  reading_paused_ = paused;
  update_interest();
}

void KernelSession::on_client_backlog(int client_fd) {
  if (running_ && running_->client == client_fd) refresh_pause();
}

// The kernel abuses its channel: it goes (state lost, said in the cell's result), and
// nothing more of what it sends is read.
void KernelSession::kill_for_abuse(const std::string& reason) {
  log::limited(log::Level::kWarn, "kernel-abuse", "killed the Python kernel: " + reason);
  if (running_ && running_->kill_reason.empty()) running_->kill_reason = reason;
  if (control_) host_.loop().remove(control_.get());
  control_.reset();
  to_kernel_.clear();
  to_kernel_sent_ = 0;
  kill_kernel();
}

void KernelSession::on_kernel_message(const Json& m) {
  std::string event = m.value("event", "");
  if (event == "ready" && state_ == State::kStarting) {
    state_ = State::kIdle;
    failed_starts_ = 0;
    dispatch();
  } else if (event == "progress") {
    on_progress(m);
  } else if (m.value("op", "") == "helper") {
    on_helper_call(m);
  } else if (event == "result" && running_ && m.value("cell", uint64_t{0}) == running_->number) {
    host_.loop().cancel_timer(running_->timer);
    for (bool is_stdout : {true, false})
      for (size_t taken = 0; taken < kDrainLimit && relay(is_stdout); taken += kReadChunk) {}
    Json r = base_result(*running_);
    if (std::string wrong = kernel_messages::take_result(m, r, running_->request.output_limit); !wrong.empty()) {
      ++bad_frames_;
      log::limited(log::Level::kWarn, "malformed-result",
                   "cell " + std::to_string(running_->number) + ": the kernel's result was malformed: " + wrong);
    }
    std::string status = r["status"];
    // A cell whose tool calls the deadline abandoned may finish before the interrupt lands
    // (its threads got their errors at once): it still ran past its deadline.
    bool cut_by_deadline = status == "ok" && running_->timed_out && running_->abandoned_tool_calls > 0;
    if ((status == "interrupted" || cut_by_deadline) && running_->timed_out) {
      status = "timeout";
      r["message"] = "the cell ran past its deadline of " + seconds_text(running_->request.timeout_s) +
                     " s and was interrupted; its variables are kept";
    } else if (status == "interrupted") {
      r["message"] = "the cell was interrupted; its variables are kept";
    }
    r["status"] = status;
    finish(std::move(r));
    state_ = State::kIdle;
    dispatch();
  }
}

// A helper call from the cell's threads goes to the tool bridge; its answer comes back
// to this kernel only (a kernel restarted meanwhile never sees its predecessor's).
void KernelSession::on_helper_call(const Json& m) {
  uint64_t call = m.at("call").get<uint64_t>();
  std::string name = m.at("name").get<std::string>();
  const Json args = m.value("args", Json::object());
  if (!args.is_object() || name.size() > 64) {
    ++bad_frames_;
    answer_kernel({{"event", "reply"}, {"call", call}, {"result", nullptr}, {"error", "malformed helper call"}});
    return;
  }
  uint64_t cell = running_ ? running_->number : 0;
  if (running_ && running_->timed_out) {  // a queued task of the cell's pool, after the deadline
    ++running_->abandoned_tool_calls;
    answer_kernel({{"event", "reply"}, {"call", call}, {"result", nullptr},
                   {"error", name + ": abandoned: the cell reached its deadline"}});
    return;
  }
  host_.tool_call(name, args, cell, [this, kernel = command_id_, call](const Json& a) {
    if (kernel != command_id_ || !control_) return;
    answer_kernel({{"event", "reply"}, {"call", call}, {"result", a.at("result")}, {"error", a.at("error")}});
  });
}

// Progress reaches the client at most every kProgressIntervalMs: a cell calling
// set_progress in a tight loop sends the latest, not a million events.
void KernelSession::on_progress(const Json& m) {
  if (!running_ || !running_->request.stream) return;
  auto progress = kernel_messages::take_progress(m);
  if (!progress) {
    ++bad_frames_;
    return;
  }
  running_->pending_progress = std::move(*progress);
  if (running_->progress_timer < 0) send_progress();
}

void KernelSession::send_progress() {
  Cell& c = *running_;
  if (c.pending_progress.is_null()) return;
  Json event = {{"event", "progress"}, {"cell", c.number}};
  event.update(c.pending_progress);
  c.pending_progress = nullptr;
  host_.send_to_client(c.client, event);
  auto timer = host_.loop().add_timer(kProgressIntervalMs, [this] {
    if (!running_) return;
    running_->progress_timer = -1;
    send_progress();
  });
  c.progress_timer = timer ? *timer : -1;
}

bool KernelSession::relay(bool is_stdout) {
  std::string buf;
  if (!host_.loop().read_chunk(is_stdout ? out_ : err_, buf)) return false;
  if (running_) {
    (is_stdout ? running_->out : running_->err)->append(buf);
    if (running_->request.stream) {
      Json event = {{"event", "output"}, {"cell", running_->number}, {"stream", is_stdout ? "stdout" : "stderr"}};
      protocol::put_bytes(event, buf);
      host_.send_to_client(running_->client, event);
    }
  } else {
    std::string& stray = is_stdout ? stray_out_ : stray_err_;
    stray.append(buf.substr(0, kStrayLimit - std::min(kStrayLimit, stray.size())));
  }
  return true;
}

void KernelSession::on_output(bool is_stdout) { relay(is_stdout); }

void KernelSession::on_deadline() {
  if (!running_) return;
  running_->timer = -1;
  running_->timed_out = true;
  // Its threads waiting on tools go on at once (with an error), so that the interrupt
  // is not held up behind a ThreadPoolExecutor's shutdown.
  running_->abandoned_tool_calls += host_.abandon_tool_calls(running_->number);
  // A KeyboardInterrupt in the cell; only the kernel's process, not what it started.
  host_.signal_in_sandbox(command_id_, SIGINT, false);
  auto timer = host_.loop().add_timer(kGraceMs, [this] { on_grace_over(); });
  running_->timer = timer ? *timer : -1;
}

void KernelSession::interrupt() {
  if (!running_) return;
  // Asked again: SIGINT again, within the first one's grace. A SIGINT that reached the
  // kernel after the cell was sent but before its code started is ignored there (only
  // running user code is interruptible), so a caller who sees the cell still running
  // must be able to try again rather than wait for the grace to kill the kernel.
  if (running_->interrupted || running_->timed_out) {
    host_.signal_in_sandbox(command_id_, SIGINT, false);
    return;
  }
  running_->interrupted = true;
  host_.loop().cancel_timer(running_->timer);
  host_.signal_in_sandbox(command_id_, SIGINT, false);
  auto timer = host_.loop().add_timer(kGraceMs, [this] { on_grace_over(); });
  running_->timer = timer ? *timer : -1;
}

// The cell did not stop (a C extension not checking signals, a catastrophic regex): the
// interpreter goes, with everything it started, and a fresh one comes.
void KernelSession::on_grace_over() {
  if (!running_) return;
  running_->timer = -1;
  kill_kernel();
}

void KernelSession::kill_kernel() {
  if (command_id_) host_.signal_in_sandbox(command_id_, SIGKILL, true);
}

void KernelSession::restart() {
  if (running_) running_->restarted = true;
  if (state_ == State::kStopped) {
    failed_starts_ = 0;
    start();
    return;
  }
  restart_wanted_ = true;
  kill_kernel();
}

void KernelSession::shutdown() {
  shutting_down_ = true;
  kill_kernel();
}

void KernelSession::on_spawn_failed(int err) {
  close_kernel_fds();
  state_ = State::kStopped;
  fail_queued(sys_error("start the Python kernel (/opt/nsbox/nsbox-kernel)", err));
}

void KernelSession::on_exited(std::optional<int> exit_code, std::optional<int> signal) {
  bool was_starting = state_ == State::kStarting;
  std::string seccomp_kill = std::move(seccomp_kill_);  // close_kernel_fds forgets the kernel
  for (bool is_stdout : {true, false})
    for (size_t taken = 0; taken < kDrainLimit && relay(is_stdout); taken += kReadChunk) {}
  close_kernel_fds();
  state_ = State::kStopped;
  if (running_) {
    Cell& c = *running_;
    host_.loop().cancel_timer(c.timer);
    Json r = base_result(c);
    r["state_lost"] = true;
    bool oom = signal == SIGKILL && host_.oom_kills() > c.oom_before;
    if (signal == SIGKILL && !seccomp_kill.empty()) {
      r["status"] = "killed";
      r["reason"] = "seccomp";
      r["message"] = "killed by the seccomp filter: " + seccomp_kill + "; the kernel was restarted and its state is lost";
    } else if (!c.kill_reason.empty()) {
      r["status"] = "killed";
      r["reason"] = "protocol";
      r["message"] = "the kernel was killed: " + c.kill_reason + "; it was restarted and its state is lost";
    } else if (c.timed_out) {
      r["status"] = "timeout";
      r["message"] = "the cell ran past its deadline of " + seconds_text(c.request.timeout_s) +
                     " s and did not stop when interrupted; the kernel was restarted and its state is lost";
    } else if (c.interrupted) {
      r["status"] = "interrupted";
      r["message"] = "the cell did not stop when interrupted; the kernel was restarted and its state is lost";
    } else if (c.restarted) {
      r["status"] = "killed";
      r["reason"] = "restart";
      r["message"] = "the kernel was restarted while the cell ran; its state is lost";
    } else {
      r["status"] = "killed";
      r["reason"] = oom ? "oom" : "crash";
      r["message"] = oom ? host_.oom_message() + "; the kernel was restarted and its state is lost"
                         : "the kernel died (" + (signal ? "signal " + std::to_string(*signal) : "exit status " + std::to_string(exit_code.value_or(0))) +
                               "); it was restarted and its state is lost";
    }
    finish(std::move(r));
  } else if (!shutting_down_ && !restart_wanted_ && !was_starting) {
    state_lost_unseen_ = true;  // it died between cells: the next result says so
  }
  if (shutting_down_) return;
  if (was_starting && !restart_wanted_ && ++failed_starts_ >= kMaxFailedStarts) {
    fail_queued(kernel_error("the Python kernel exited while starting (" + std::to_string(failed_starts_) + " times)"));
    return;  // the next cell tries again
  }
  restart_wanted_ = false;
  start();
}

void KernelSession::client_gone(int client_fd) {
  for (auto it = queue_.begin(); it != queue_.end();)
    it = (*it)->client == client_fd ? queue_.erase(it) : std::next(it);
  // Nobody waits for that cell any more: stop it, keeping the kernel's state (as E2B does).
  if (running_ && running_->client == client_fd) {
    running_->client = -1;
    refresh_pause();
    interrupt();
  }
}

Json KernelSession::base_result(const Cell& c) const {
  Json r = {{"cell", c.number}, {"status", "error"}, {"results", nullptr}, {"error", nullptr},
            {"display", Json::array()}, {"execution_count", nullptr}, {"state_lost", false}};
  r["duration_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - c.started).count();
  r["abandoned_tool_calls"] = c.abandoned_tool_calls;
  c.out->put(r, "stdout");
  c.err->put(r, "stderr");
  return r;
}

void KernelSession::finish(Json result) {
  Cell& c = *running_;
  host_.loop().cancel_timer(c.progress_timer);
  if (!c.pending_progress.is_null()) send_progress();  // the last step before the result
  host_.loop().cancel_timer(c.progress_timer);
  if (state_lost_unseen_) {
    result["state_lost"] = true;
    if (!result.contains("message"))
      result["message"] = "the kernel died after the previous cell and was restarted: its state was lost before this cell ran";
    state_lost_unseen_ = false;
  }
  int client = c.client;
  running_.reset();
  refresh_pause();
  host_.send_to_client(client, {{"ok", true}, {"cell", result["cell"]}, {"result", std::move(result)}});
}

void KernelSession::fail_queued(const Error& e) {
  Json err = {{"code", error_code_name(e.code)}, {"message", e.message}};
  if (!e.hint.empty()) err["hint"] = e.hint;
  for (auto& cell : queue_) host_.send_to_client(cell->client, {{"ok", false}, {"error", err}});
  queue_.clear();
}

void KernelSession::close_kernel_fds() {
  for (UniqueFd* fd : {&control_, &out_, &err_}) {
    if (*fd) host_.loop().remove(fd->get());
    fd->reset();
  }
  command_id_ = 0;
  sandbox_pid_ = 0;
  seccomp_kill_.clear();
}

Json KernelSession::status() const {
  const char* names[] = {"stopped", "starting", "idle", "busy"};
  return {{"state", names[static_cast<int>(state_)]}, {"queued_cells", queue_.size()},
          {"running_cell", running_ ? Json(running_->number) : Json(nullptr)}};
}

}  // namespace nsbox
