#include "runtime/supervisor/bridge_socket.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

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
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  Connection& c = it->second;
  if (events & EPOLLOUT) flush(c);
  if (!(events & (EPOLLIN | EPOLLHUP | EPOLLERR))) return;
  auto status = c.reader.read_available(fd);
  uint64_t generation = c.generation;
  size_t bad = protocol::dispatch_untrusted(c.reader, "a process in the sandbox (tool bridge socket)",
                                            [&](const Json& m) { on_request(fd, m); });
  it = connections_.find(fd);
  if (it == connections_.end() || it->second.generation != generation) return;  // closed meanwhile
  it->second.bad_frames += bad;
  if (!status || *status == protocol::FrameReader::Status::kClosed || it->second.bad_frames > kMaxBadFrames) close(fd);
}

void BridgeSocket::on_request(int fd, const Json& m) {
  Connection& c = connections_.at(fd);
  const Json& call = m.contains("call") ? m["call"] : Json();
  const Json& helper = m.contains("helper") ? m["helper"] : Json();
  const Json& args = m.contains("args") ? m["args"] : Json();
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
  bridge_->call(helper.get<std::string>(), args, 0, [this, fd, generation, id = call](const Json& a) {
    auto it = connections_.find(fd);
    if (it == connections_.end() || it->second.generation != generation) return;
    --it->second.outstanding;
    answer(fd, generation, {{"call", id}, {"result", a.at("result")}, {"error", a.at("error")}});
  });
}

void BridgeSocket::answer(int fd, uint64_t generation, const Json& reply) {
  auto it = connections_.find(fd);
  if (it == connections_.end() || it->second.generation != generation) return;
  Connection& c = it->second;
  c.out += protocol::encode(reply);
  if (c.out.size() > kMaxUnsent) {
    log::limited(log::Level::kWarn, "bridge-unread", "closed a tool bridge connection that stopped reading its answers");
    loop_->defer([this, fd, generation] {
      auto again = connections_.find(fd);
      if (again != connections_.end() && again->second.generation == generation) close(fd);
    });
    return;
  }
  flush(c);
}

void BridgeSocket::flush(Connection& c) {
  while (!c.out.empty()) {
    ssize_t n = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (n > 0) {
      c.out.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN) c.out.clear();  // the peer is gone; the read side closes it
    break;
  }
  (void)loop_->modify(c.fd.get(), EPOLLIN | (c.out.empty() ? 0u : uint32_t{EPOLLOUT}));
}

void BridgeSocket::close(int fd) {
  loop_->remove(fd);
  connections_.erase(fd);
}

}  // namespace nsbox
