#include "runtime/supervisor/kernel_session.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace nsbox {
namespace {

using protocol::Json;
using Clock = std::chrono::steady_clock;

constexpr size_t kReadChunk = 64u << 10;
constexpr size_t kDrainLimit = 256u << 10;
constexpr size_t kStrayLimit = 64u << 10;
constexpr int kMaxFailedStarts = 3;
constexpr const char* kOutputDir = "/mnt/files/.nsbox/output";

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
  if (auto s = j.find("stream"); s != j.end() && s->is_boolean()) r.stream = s->get<bool>();
  return r;
}

void KernelSession::start() {
  if (state_ != State::kStopped || shutting_down_) return;
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
  auto id = host_.spawn_in_sandbox(kKernelArgv, {{"stdout", out_w.get()}, {"stderr", err_w.get()}, {"fd3", theirs.get()}});
  if (!id) {
    close_kernel_fds();
    fail_queued(std::move(id.error()).context("start the Python kernel"));
    return;
  }
  command_id_ = *id;
  reader_ = protocol::FrameReader(protocol::kMaxClientFrame);
  (void)host_.loop().add(control_.get(), EPOLLIN, [this](uint32_t) { on_kernel_messages(); });
  (void)host_.loop().add(out_.get(), EPOLLIN, [this](uint32_t) { on_output(true); });
  (void)host_.loop().add(err_.get(), EPOLLIN, [this](uint32_t) { on_output(false); });
  state_ = State::kStarting;
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
  c.out = std::make_unique<OutputCapture>(c.request.output_limit, volume, prefix + "-stdout.txt");
  c.err = std::make_unique<OutputCapture>(c.request.output_limit, volume, prefix + "-stderr.txt");
  c.out->append(stray_out_);
  c.err->append(stray_err_);
  stray_out_.clear();
  stray_err_.clear();
  c.started = Clock::now();
  c.oom_before = host_.oom_kills();
  Json execute = {{"op", "execute"}, {"cell", c.number}, {"output_dir", kOutputDir}, {"results_limit", c.request.output_limit}};
  if (protocol::is_valid_utf8(c.request.code)) execute["code"] = c.request.code;
  else execute["code_b64"] = protocol::base64_encode(c.request.code);
  if (auto sent = protocol::send_frame(control_.get(), execute); !sent) {
    Json r = base_result(c);
    r["status"] = "error";
    r["message"] = "could not send the cell to the kernel: " + sent.error().message;
    finish(std::move(r));
    kill_kernel();
    return;
  }
  state_ = State::kBusy;
  auto timer = host_.loop().add_timer(static_cast<uint64_t>(c.request.timeout_s * 1000), [this] { on_deadline(); });
  c.timer = timer ? *timer : -1;
  host_.send_to_client(c.client, {{"event", "started"}, {"cell", c.number}});
}

void KernelSession::on_kernel_messages() {
  auto status = reader_.read_available(control_.get());
  // The kernel runs user code: its messages are untrusted, like a client's.
  protocol::dispatch_untrusted(reader_, "the kernel", [this](const Json& m) { on_kernel_message(m); });
  if ((!status || *status == protocol::FrameReader::Status::kClosed) && control_) {
    host_.loop().remove(control_.get());  // its exit, reported by init, does the rest
    control_.reset();
  }
}

void KernelSession::on_kernel_message(const Json& m) {
  std::string event = m.value("event", "");
  if (event == "ready" && state_ == State::kStarting) {
    state_ = State::kIdle;
    failed_starts_ = 0;
    dispatch();
  } else if (event == "progress" && running_ && running_->request.stream) {
    host_.send_to_client(running_->client, {{"event", "progress"}, {"cell", running_->number},
                                            {"current_step", m.value("current_step", "")},
                                            {"current_step_metric", m.value("current_step_metric", Json())}});
  } else if (m.value("op", "") == "helper") {
    // The tool bridge (run_tool, invoke_llm, upload_local_file) comes with its own issue.
    std::string name = m.value("name", "helper");
    Json reply = {{"event", "reply"}, {"call", m.value("call", 0)}, {"result", nullptr},
                  {"error", name + ": the tool bridge is not configured for this sandbox"}};
    if (control_) (void)protocol::send_frame(control_.get(), reply);
  } else if (event == "result" && running_ && m.value("cell", uint64_t{0}) == running_->number) {
    host_.loop().cancel_timer(running_->timer);
    for (bool is_stdout : {true, false})
      for (size_t taken = 0; taken < kDrainLimit && relay(is_stdout); taken += kReadChunk) {}
    Json r = base_result(*running_);
    std::string status = m.value("status", "error");
    if (status == "interrupted" && running_->timed_out) {
      status = "timeout";
      r["message"] = "the cell ran past its deadline of " + seconds_text(running_->request.timeout_s) +
                     " s and was interrupted; its variables are kept";
    } else if (status == "interrupted") {
      r["message"] = "the cell was interrupted; its variables are kept";
    }
    r["status"] = status;
    for (const char* k : {"results", "results_file_path", "error", "display", "execution_count"})
      if (m.contains(k)) r[k] = m[k];
    finish(std::move(r));
    state_ = State::kIdle;
    dispatch();
  }
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
  // A KeyboardInterrupt in the cell; only the kernel's process, not what it started.
  host_.signal_in_sandbox(command_id_, SIGINT, false);
  auto timer = host_.loop().add_timer(kGraceMs, [this] { on_grace_over(); });
  running_->timer = timer ? *timer : -1;
}

void KernelSession::interrupt() {
  if (!running_ || running_->interrupted || running_->timed_out) return;
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
    if (c.timed_out) {
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
    interrupt();
  }
}

Json KernelSession::base_result(const Cell& c) const {
  Json r = {{"cell", c.number}, {"status", "error"}, {"results", nullptr}, {"error", nullptr},
            {"display", Json::array()}, {"execution_count", nullptr}, {"state_lost", false}};
  r["duration_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - c.started).count();
  c.out->put(r, "stdout");
  c.err->put(r, "stderr");
  return r;
}

void KernelSession::finish(Json result) {
  int client = running_->client;
  running_.reset();
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
}

Json KernelSession::status() const {
  const char* names[] = {"stopped", "starting", "idle", "busy"};
  return {{"state", names[static_cast<int>(state_)]}, {"queued_cells", queue_.size()},
          {"running_cell", running_ ? Json(running_->number) : Json(nullptr)}};
}

}  // namespace nsbox
