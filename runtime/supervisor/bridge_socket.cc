#include "runtime/supervisor/bridge_socket.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "isolation/sys/log.h"
#include "runtime/protocol/unix_socket.h"
#include "runtime/protocol/tool_call.h"

namespace nsbox {

using protocol::Json;

namespace {

bool is_bridge_helper(const std::string& name) {
  for (const char* h : tools::kHelpers)
    if (name == h) return true;
  return false;
}

}  // namespace

Result<std::unique_ptr<BridgeSocket>> BridgeSocket::listen(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return fail(sys_error("mkdir " + dir));
  if (::chmod(dir.c_str(), 0755) != 0) return fail(sys_error("chmod " + dir));
  std::string path = dir + "/bridge.sock";
  ::unlink(path.c_str());  // a previous supervisor's
  std::unique_ptr<BridgeSocket> s(new BridgeSocket());
  s->listen_fd_ = NSBOX_TRY(protocol::listen_unix(path));
  if (::chmod(path.c_str(), 0666) != 0) return fail(sys_error("chmod " + path));
  return s;
}

BridgeSocket::~BridgeSocket() {
  if (!loop_) return;
  for (auto& [fd, c] : connections_) loop_->remove(fd);
  loop_->remove(listen_fd_.get());
}

Result<void> BridgeSocket::serve(EventLoop& loop, ToolBridge& bridge) {
  loop_ = &loop;
  bridge_ = &bridge;
  ::fcntl(listen_fd_.get(), F_SETFL, O_NONBLOCK);
  return loop.add(listen_fd_.get(), EPOLLIN, [this](uint32_t) { accept_connections(); });
}

void BridgeSocket::accept_connections() {
  for (;;) {
    UniqueFd fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd) return;  // EAGAIN, or out of fds: the next connection tries again
    if (connections_.size() >= kMaxConnections) {
      (void)::send(fd.get(), protocol::encode({{"call", 0}, {"result", nullptr},
                                               {"error", "the tool bridge has " + std::to_string(kMaxConnections) +
                                                             " connections open; close some"}}).c_str(), 0, MSG_NOSIGNAL);
      continue;
    }
    int raw = fd.get();
    Connection& c = connections_[raw];
    c.fd = std::move(fd);
    c.generation = next_generation_++;
    if (!loop_->add(raw, EPOLLIN, [this, raw](uint32_t ev) { on_event(raw, ev); })) connections_.erase(raw);
  }
}

void BridgeSocket::on_event(int fd, uint32_t events) {
  using Status = protocol::FrameReader::Status;
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  Connection& c = it->second;
  if (c.evicted) return;  // closed after this batch of events
  if (events & EPOLLOUT) flush(c);
  if (!(events & (EPOLLIN | EPOLLHUP | EPOLLERR))) return;
  if (c.waiting) {  // not read until there is room; a peer that hung up is gone for good
    if (events & (EPOLLHUP | EPOLLERR)) close(fd);
    return;
  }
  // Frames one after another, as long as bytes come, up to the loop's read budget.
  Result<Status> status = Status::kOpen;
  const uint64_t start = c.reader.consumed() + c.reader.buffered();
  for (uint64_t before = start;;) {
    status = read_some(c);
    const uint64_t now = c.reader.consumed() + c.reader.buffered();
    if (!status || *status == Status::kClosed || c.waiting || now == before ||
        now - start >= protocol::FrameReader::kDefaultReadBudget)
      break;
    before = now;
  }
  uint64_t generation = c.generation;
  size_t bad = protocol::dispatch_untrusted(c.reader, "a process in the sandbox (tool bridge socket)",
                                            [&](Json& m) { on_request(fd, m); });
  it = connections_.find(fd);
  if (it == connections_.end() || it->second.generation != generation) return;  // closed meanwhile
  it->second.bad_frames += bad;
  if (!status || *status == Status::kClosed || it->second.bad_frames > kMaxBadFrames) close(fd);
}

// The next bytes of `c` that may be held: a frame's 4-byte header, read alone; then, once
// reading_ has room for the whole frame it declares, the frame, never past its end.
Result<protocol::FrameReader::Status> BridgeSocket::read_some(Connection& c) {
  using Status = protocol::FrameReader::Status;
  if (c.admitted == 0) {
    if (size_t have = c.reader.buffered(); have < 4) {
      auto status = c.reader.read_available(c.fd.get(), 4 - have);  // an oversized length fails here
      if (!status || *status == Status::kClosed || c.reader.buffered() < 4) return status;  // or an empty frame, done
    }
    const size_t frame = 4 + *c.reader.next_length();
    if (reading_ + frame > kMaxReading) {
      c.waiting = true;
      watch(c);
      return Status::kOpen;
    }
    c.admitted = frame;
    reading_ += frame;
  }
  auto status = c.reader.read_available(
      c.fd.get(), std::min(c.admitted - c.reader.buffered(), protocol::FrameReader::kDefaultReadBudget));
  if (c.reader.buffered() == 0) end_frame(c);  // complete: taken out as a frame
  return status;
}

void BridgeSocket::end_frame(Connection& c) {
  if (bridge_) bridge_->released(c.admitted);  // parsed and handled, then freed, within this event
  reading_ -= c.admitted;
  c.admitted = 0;
  wake_waiting();
}

// Each tries again (level-triggered, its bytes are still there); who finds no room waits again.
void BridgeSocket::wake_waiting() {
  for (auto& [fd, c] : connections_)
    if (c.waiting) {
      c.waiting = false;
      watch(c);
    }
}

void BridgeSocket::on_request(int fd, Json& m) {
  Connection& c = connections_.at(fd);
  Json none;
  const Json& call = m.contains("call") ? m["call"] : none;
  const Json& helper = m.contains("helper") ? m["helper"] : none;
  Json& args = m.contains("args") ? m["args"] : none;  // moved on, not copied
  if (!call.is_number_unsigned() || !helper.is_string() || !args.is_object() || !is_bridge_helper(helper.get<std::string>())) {
    ++c.bad_frames;
    answer(fd, c.generation, {{"call", call.is_number_unsigned() ? call : Json(0)}, {"result", nullptr},
                              {"error", "malformed request: {\"call\": N, \"helper\": NAME, \"args\": {...}} with a known helper"}});
    return;
  }
  if (c.outstanding >= kMaxCallsPerConnection) {
    answer(fd, c.generation, {{"call", call}, {"result", nullptr},
                              {"error", helper.get<std::string>() + ": too many calls in flight on this connection (" +
                                            std::to_string(kMaxCallsPerConnection) + ")"}});
    return;
  }
  ++c.outstanding;
  uint64_t generation = c.generation;
  bridge_->call(helper.get<std::string>(), std::move(args), 0, [this, fd, generation, id = call](const Json& a) {
    auto it = connections_.find(fd);
    if (it == connections_.end() || it->second.generation != generation) return;
    --it->second.outstanding;
    answer(fd, generation, {{"call", id}, {"result", a.at("result")}, {"error", a.at("error")}});
  });
}

void BridgeSocket::answer(int fd, uint64_t generation, const Json& reply) {
  auto it = connections_.find(fd);
  if (it == connections_.end() || it->second.generation != generation || it->second.evicted) return;
  Connection& c = it->second;
  std::string frame = protocol::encode(reply);
  unsent_ += frame.size();
  c.out += frame;
  if (unsent_ > kMaxUnsent) evict_largest_backlog();
  if (!c.evicted) flush(c);
}

// Answers nobody reads are what a connection can make the supervisor hold: all together
// stay under kMaxUnsent, and the connection holding the most goes (a reader that keeps
// up holds at most the answer it is reading).
void BridgeSocket::evict_largest_backlog() {
  Connection* largest = nullptr;
  for (auto& [fd, c] : connections_)
    if (!c.evicted && (!largest || c.out.size() > largest->out.size())) largest = &c;
  if (!largest) return;
  log::limited(log::Level::kWarn, "bridge-unread",
               "closed a tool bridge connection that stopped reading its answers (" + std::to_string(largest->out.size()) +
                   " bytes unread; the connections of a sandbox may hold " + std::to_string(kMaxUnsent >> 20) + " MiB)");
  unsent_ -= largest->out.size();
  std::string().swap(largest->out);
  largest->evicted = true;
  loop_->defer([this, fd = largest->fd.get(), generation = largest->generation] {
    auto again = connections_.find(fd);
    if (again != connections_.end() && again->second.generation == generation) close(fd);
  });
}

void BridgeSocket::flush(Connection& c) {
  while (!c.out.empty()) {
    ssize_t n = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (n > 0) {
      c.out.erase(0, static_cast<size_t>(n));
      unsent_ -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN) {  // the peer is gone; the read side closes it
      unsent_ -= c.out.size();
      c.out.clear();
    }
    break;
  }
  if (c.out.empty() && c.out.capacity() > (256u << 10)) {
    if (bridge_) bridge_->released(c.out.capacity());
    std::string().swap(c.out);
  }
  watch(c);
}

// What the loop watches for `c`: its requests unless it waits for room, and room to send
// while answers wait. (Hang-ups are reported always.)
void BridgeSocket::watch(Connection& c) {
  (void)loop_->modify(c.fd.get(), (c.waiting ? 0u : uint32_t{EPOLLIN}) | (c.out.empty() ? 0u : uint32_t{EPOLLOUT}));
}

void BridgeSocket::close(int fd) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  Connection& c = it->second;
  const size_t admitted = c.admitted;
  const size_t freed = c.reader.buffered() + c.out.capacity();
  reading_ -= admitted;
  unsent_ -= c.out.size();
  loop_->remove(fd);
  connections_.erase(it);
  if (bridge_) bridge_->released(freed);
  if (admitted > 0) wake_waiting();
}

}  // namespace nsbox
