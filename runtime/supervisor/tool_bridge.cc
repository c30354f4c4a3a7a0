#include "runtime/supervisor/tool_bridge.h"

#include <fcntl.h>
#include <malloc.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "isolation/sys/log.h"
#include "runtime/protocol/tool_call.h"

namespace nsbox {

using protocol::Json;

namespace {

Json error_answer(const std::string& message) { return {{"result", nullptr}, {"error", message}}; }

// glibc keeps what a burst freed for reuse rather than handing it back: after 8 frames
// of 4 MiB the supervisor stayed at 306 MB. Trimmed a second after this many bytes of
// calls and answers went by: once a burst, not once a frame.
constexpr size_t kTrimAfterBytes = 1u << 20;
constexpr uint64_t kTrimDelayMs = 1000;

std::string mib(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1u << 20));
  return text;
}

}  // namespace

bool ToolBridge::rate_allows() {
  auto now = std::chrono::steady_clock::now();
  double elapsed = std::chrono::duration<double>(now - refilled_).count();
  refilled_ = now;
  tokens_ = std::min(kRateBurst, tokens_ + elapsed * kRatePerSecond);
  if (tokens_ < 1) return false;
  tokens_ -= 1;
  return true;
}

void ToolBridge::call(const std::string& helper, Json args, uint64_t cell, Reply reply) {
  auto refuse = [&](const std::string& why) {
    log::limited(log::Level::kWarn, "tool-call-refused", "refused a tool call (" + helper + "): " + why);
    reply(error_answer(helper + ": " + why));
  };
  if (!rate_allows())
    return refuse("too many tool calls (more than " + std::to_string(static_cast<int>(kRatePerSecond)) +
                  " a second); make fewer at once");
  if (pending_.size() >= kMaxPending)
    return refuse("too many tool calls in flight (" + std::to_string(pending_.size()) + "); wait for some to finish");
  const bool embedder =
      setup_.config.backend == ToolsBackend::kCallback && helper != "upload_local_file" && helper != "tool_schema";
  // The frame for the bridge, measured whoever answers: one call's limits are the same.
  uint64_t id = next_call_++;
  std::string frame = protocol::encode({{"call", id}, {"helper", helper}, {"args", embedder ? Json(args) : std::move(args)}});
  const size_t text = frame.size() - 4;
  const protocol::JsonShape shape = protocol::measure_json(std::string_view(frame).substr(4));
  if (text > tools::kMaxCallBytes) return refuse("the call is " + mib(text) + ", more than the 4 MiB a tool call may send");
  if (std::string past = protocol::past_limits(shape, protocol::kUntrustedJson, "the call"); !past.empty())
    return refuse(past + " (a tool call's limit)");
  if (embedder) {
    if (subscriber_ < 0)
      return refuse("no client serves this sandbox's tool calls (subscribe with GET /v1/sandboxes/" + setup_.sandbox_id +
                    "/events, or Sandbox.on_tool_call in the Python client)");
    return call_embedder(helper, std::move(args), cell, std::move(reply));
  }
  const size_t weight = frame.size() + shape.values * protocol::kParsedValueBytes;
  if (held_ + weight > kMaxHeldBytes)
    return refuse("the tool bridge holds " + mib(held_) + " of this sandbox's calls, and this one (" + mib(weight) +
                  " parsed) would pass the limit of " + std::to_string(kMaxHeldBytes >> 20) + " MiB; wait for some to finish, or send less");
  if (!channel_) {
    if (starts_ >= kMaxStarts)
      return refuse("the tool bridge failed " + std::to_string(starts_) + " times; see tools.log in the sandbox's state");
    if (auto started = spawn(); !started) return refuse("could not start the tool bridge: " + started.error().message);
  }
  pending_[id] = {cell, std::move(reply), false, -1};
  at_bridge_[id] = weight;
  held_ += weight;
  trim_soon(frame.size());
  if (out_.empty()) out_ = std::move(frame);
  else out_ += frame;
  flush();
}

void ToolBridge::call_embedder(const std::string& helper, Json args, uint64_t cell, Reply reply) {
  uint64_t id = next_call_++;
  auto timer = loop_.add_timer(static_cast<uint64_t>(setup_.config.call_timeout_s * 1000), [this, id] {
    auto it = pending_.find(id);
    if (it == pending_.end()) return;
    it->second.timer = -1;  // fired: nothing to cancel
    take(it)(error_answer("the embedder did not answer within " + std::to_string(static_cast<int>(setup_.config.call_timeout_s)) + " s"));
  });
  pending_[id] = {cell, std::move(reply), true, timer ? *timer : -1};
  send_(subscriber_, {{"event", "tool_call"}, {"call_id", "c-" + std::to_string(id)}, {"cell", cell}, {"helper", helper},
                      {"args", std::move(args)}});
}

ToolBridge::Reply ToolBridge::take(std::map<uint64_t, Pending>::iterator it) {
  Reply reply = std::move(it->second.reply);
  if (it->second.timer >= 0) loop_.cancel_timer(it->second.timer);
  pending_.erase(it);
  return reply;
}

Result<void> ToolBridge::subscribe(int client_fd) {
  if (setup_.config.backend != ToolsBackend::kCallback)
    return fail(make_error(ErrorCode::kInvalidArgument,
                           "sandbox " + setup_.sandbox_id + " has no callback backend (its tool calls go to its " +
                               std::string(tools_backend_name(setup_.config.backend)) + " backend): no client serves them",
                           "create the sandbox with tools {\"backend\": \"callback\"} to serve its calls"));
  subscriber_ = client_fd;
  return {};
}

void ToolBridge::client_gone(int client_fd) {
  if (subscriber_ == client_fd) subscriber_ = -1;
}

Result<void> ToolBridge::answer(const std::string& call_id, const Json& result, const Json& error) {
  auto unknown = [&] {
    return fail(make_error(ErrorCode::kNotFound, "no tool call " + call_id + " is waiting for an answer",
                           "it was answered already, timed out, or was abandoned at its cell's deadline"));
  };
  if (!call_id.starts_with("c-") || call_id.size() > 24 || call_id.find_first_not_of("0123456789", 2) != std::string::npos ||
      call_id.size() == 2)
    return unknown();
  auto it = pending_.find(std::stoull(call_id.substr(2)));
  if (it == pending_.end() || !it->second.embedder) return unknown();  // the bridge process's are not for answering
  if (!error.is_null() && !error.is_string())
    return fail(make_error(ErrorCode::kMalformedRequest, "a tool call's \"error\" must be a string or null"));
  take(it)({{"result", error.is_null() ? result : Json()}, {"error", error}});
  return {};
}

size_t ToolBridge::abandon(uint64_t cell) {
  if (cell == 0) return 0;
  std::vector<Reply> replies;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.cell == cell) {
      auto next = std::next(it);
      replies.push_back(take(it));
      it = next;
    } else {
      ++it;
    }
  }
  for (auto& r : replies) r(error_answer("abandoned: the cell reached its deadline before the tool answered"));
  return replies.size();
}

Result<void> ToolBridge::spawn() {
  ++starts_;
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return fail(sys_error("socketpair"));
  UniqueFd ours(pair[0]), theirs(pair[1]);
  int config_pipe[2];
  if (::pipe2(config_pipe, O_CLOEXEC) != 0) return fail(sys_error("pipe2"));
  UniqueFd config_r(config_pipe[0]), config_w(config_pipe[1]);
  std::string proc_root = "/proc/" + std::to_string(setup_.init_pid) + "/root";
  UniqueFd root(::open(proc_root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root) return fail(sys_error("open " + proc_root));
  std::vector<std::string> extra;
  if (const char* home = std::getenv("HOME")) extra.push_back(std::string("HOME=") + home);
  // stdin: the config; stdout: nothing; stderr: our log; fd 3: the channel; fd 4: the root.
  process_ = NSBOX_TRY(HelperProcess::start({setup_.program, {"nsbox-toolbridge"},
                                             {config_r.get(), -1, STDERR_FILENO, theirs.get(), root.get()},
                                             helper_environment(std::move(extra)), "the tool bridge"}));
  config_r.reset();
  theirs.reset();
  Json config = {{"sandbox_id", setup_.sandbox_id}, {"tools", setup_.config.to_json()}, {"keys", setup_.keys.to_json()},
                 {"shared_dir", setup_.shared_dir},
                 {"uid", setup_.uid}, {"gid", setup_.gid}, {"log_file", setup_.log_file}};
  std::string text = config.dump();  // it holds the keys: send_config wipes it
  if (auto sent = send_config(std::move(config_w), text, "the tool bridge"); !sent)
    log::warn("the tool bridge did not take its config: " + sent.error().message);
  ::fcntl(ours.get(), F_SETFL, O_NONBLOCK);
  channel_ = std::move(ours);
  reader_ = protocol::FrameReader(protocol::kMaxClientFrame, protocol::kAnswerJson);
  NSBOX_CHECK(loop_.add(channel_.get(), EPOLLIN, [this](uint32_t events) {
    if (events & EPOLLOUT) flush();
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable();
  }));
  if (process_.pidfd() >= 0) NSBOX_CHECK(loop_.add(process_.pidfd(), EPOLLIN, [this](uint32_t) { on_exit(); }));
  log::info("started the tool bridge (pid " + std::to_string(process_.pid()) + ", backend " +
            std::string(tools_backend_name(setup_.config.backend)) + ")");
  return {};
}

void ToolBridge::flush() {
  if (!channel_) return;
  while (!out_.empty()) {
    ssize_t n = ::send(channel_.get(), out_.data(), out_.size(), MSG_NOSIGNAL);
    if (n > 0) {
      out_.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;  // EAGAIN: the loop says when; an error: the read side sees the end
  }
  if (out_.empty() && out_.capacity() > (256u << 10)) std::string().swap(out_);
  (void)loop_.modify(channel_.get(), EPOLLIN | (out_.empty() ? 0u : uint32_t{EPOLLOUT}));
}

void ToolBridge::on_readable() {
  const uint64_t before = reader_.consumed();
  auto status = reader_.read_available(channel_.get());
  protocol::dispatch_untrusted(reader_, "the tool bridge", [this](Json& m) {
    const uint64_t id = m.at("call").get<uint64_t>();
    if (auto held = at_bridge_.find(id); held != at_bridge_.end()) {
      held_ -= held->second;
      at_bridge_.erase(held);
    }
    auto it = pending_.find(id);
    if (it == pending_.end()) return;  // abandoned
    Reply reply = std::move(it->second.reply);
    pending_.erase(it);
    Json answer = Json::object();  // the result moved, not copied: it can be megabytes
    answer["result"] = m.contains("result") ? std::move(m["result"]) : Json();
    answer["error"] = m.contains("error") ? std::move(m["error"]) : Json();
    reply(answer);
  });
  trim_soon(reader_.consumed() - before);
  if (!status || *status == protocol::FrameReader::Status::kClosed) {
    loop_.remove(channel_.get());
    channel_.reset();
    out_.clear();
    fail_all("the tool bridge exited; see tools.log in the sandbox's state");
  }
}

void ToolBridge::released(size_t bytes) { trim_soon(bytes); }

void ToolBridge::trim_soon(size_t bytes) {
  since_trim_ += bytes;
  if (since_trim_ < kTrimAfterBytes || trim_timer_ >= 0) return;
  auto timer = loop_.add_timer(kTrimDelayMs, [this] {
    trim_timer_ = -1;
    since_trim_ = 0;
    ::malloc_trim(0);
  });
  if (timer) trim_timer_ = *timer;
}

void ToolBridge::forget_held() {
  at_bridge_.clear();
  held_ = 0;
}

void ToolBridge::on_exit() {
  pid_t pid = process_.pid();
  if (std::string how = process_.reap(); !how.empty()) log::warn("the tool bridge (pid " + std::to_string(pid) + ") " + how);
  loop_.remove(process_.pidfd());
  process_ = HelperProcess();
  if (channel_) {
    loop_.remove(channel_.get());
    channel_.reset();
    out_.clear();
    fail_all("the tool bridge exited; see tools.log in the sandbox's state");
  }
}

// The bridge process's calls (an embedder's are not its).
void ToolBridge::fail_all(const std::string& why) {
  forget_held();
  std::vector<Reply> replies;
  for (auto it = pending_.begin(); it != pending_.end();) {
    auto next = std::next(it);
    if (!it->second.embedder) replies.push_back(take(it));
    it = next;
  }
  for (auto& r : replies) r(error_answer(why));
}

void ToolBridge::stop() {
  for (auto& [id, p] : pending_)
    if (p.timer >= 0) loop_.cancel_timer(p.timer);
  pending_.clear();
  forget_held();
  if (trim_timer_ >= 0) loop_.cancel_timer(std::exchange(trim_timer_, -1));
  if (channel_) {
    loop_.remove(channel_.get());
    channel_.reset();
  }
  if (process_.pidfd() >= 0) loop_.remove(process_.pidfd());
  process_.stop(0);  // it holds no state worth a grace: calls in flight are dropped anyway
  setup_.keys.wipe();
}

}  // namespace nsbox
