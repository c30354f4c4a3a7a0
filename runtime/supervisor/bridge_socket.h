// The tool bridge's socket, for processes in the sandbox other than the kernel (a script
// run through the bash tool, a cell's subprocess): <run>/sandboxes/<id>/bridge/bridge.sock
// on the host, bound read-only at /run/nsbox/bridge.sock inside (only this sandbox's
// mount namespace has it, and only its supervisor listens). The in-sandbox module
// nsbox_helpers speaks it:
//
//   -> {"call": N, "helper": "run_tool", "args": {...}}      frames as on every nsbox socket
//   <- {"call": N, "result": ..., "error": null | "..."}     in any order
//
// Hostile input is answered with errors and costs bounded memory: at most kMaxConnections
// at once, frames of at most kMaxRequestFrame and protocol::kUntrustedJson's shape,
// kMaxCallsPerConnection outstanding per connection, a connection that sends
// kMaxBadFrames malformed frames is closed. What the connections hold together is
// bounded too, not per connection (64 of them would multiply it):
//   - frames being read, kMaxReading: a frame is read only once its whole length fits
//     (its header says it); until then its connection is not read, and its sender waits
//     (the bytes stay in the sandbox's socket buffer). A frame admitted can always be
//     completed, so readers never deadlock one another;
//   - answers not yet read by their connection, kMaxUnsent: past it, the connection with
//     the most unread is closed.
// The bridge's own rate, in-flight and held-bytes limits apply to every call.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "isolation/sys/unique_fd.h"
#include "runtime/protocol/frame.h"
#include "runtime/supervisor/event_loop.h"
#include "runtime/supervisor/tool_bridge.h"

namespace nsbox {

class BridgeSocket {
 public:
  static constexpr size_t kMaxConnections = 64;
  static constexpr size_t kMaxRequestFrame = 4u << 20;
  static constexpr size_t kMaxReading = 8u << 20;
  static constexpr size_t kMaxCallsPerConnection = 64;
  static constexpr size_t kMaxBadFrames = 16;
  static constexpr size_t kMaxUnsent = 32u << 20;

  // Makes `dir` (0755) and listens at dir/bridge.sock (0666: the sandbox user connects).
  // Before the sandbox is built: the directory is bound into it then.
  static Result<std::unique_ptr<BridgeSocket>> listen(const std::string& dir);

  // Serves connections through `bridge` from now on.
  Result<void> serve(EventLoop& loop, ToolBridge& bridge);
  ~BridgeSocket();

 private:
  struct Connection {
    UniqueFd fd;
    uint64_t generation = 0;
    protocol::FrameReader reader{kMaxRequestFrame, protocol::kUntrustedJson};
    std::string out;
    size_t outstanding = 0;
    size_t bad_frames = 0;
    size_t admitted = 0;   // the length of the frame being read, held in reading_ (0: none)
    bool waiting = false;  // for room in reading_: not read meanwhile
    bool evicted = false;  // closing: what comes for it is dropped
  };
  BridgeSocket() = default;
  void accept_connections();
  void on_event(int fd, uint32_t events);
  Result<protocol::FrameReader::Status> read_some(Connection& c);
  void end_frame(Connection& c);
  void wake_waiting();
  void on_request(int fd, protocol::Json& m);
  void answer(int fd, uint64_t generation, const protocol::Json& reply);
  void evict_largest_backlog();
  void flush(Connection& c);
  void watch(Connection& c);
  void close(int fd);

  EventLoop* loop_ = nullptr;
  ToolBridge* bridge_ = nullptr;
  UniqueFd listen_fd_;
  std::map<int, Connection> connections_;
  uint64_t next_generation_ = 1;
  size_t reading_ = 0;  // admitted frames' lengths, summed
  size_t unsent_ = 0;   // answers not yet sent, summed
};

}  // namespace nsbox
