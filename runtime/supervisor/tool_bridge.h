// The supervisor's side of a sandbox's tool bridge (docs/tools.md): helper calls from the
// kernel's channel and from the bridge socket go to the bridge process
// (runtime/toolbridge/toolbridge_main.cc), started on the first call, and its answers come back
// to whoever asked. The keys go to that process on its stdin and are then wiped here.
//
// What a sandbox can make the host spend here is bounded, and a flood is answered with
// errors, never by blocking the event loop:
//   - calls outstanding at the bridge (kMaxPending); more are refused at once;
//   - a rate (kRatePerSecond, bursts of kRateBurst);
//   - one call's text and shape (tools::kMaxCallBytes, protocol::kUntrustedJson);
//   - what the bridge process holds of this sandbox's calls, queued or running, weighed
//     as their text plus what their values cost parsed (kMaxHeldBytes): the count alone
//     let 4 MiB frames of `[[],[],...]` grow the bridge by 70 MB each. A call abandoned at
//     its cell's deadline weighs until the bridge answers it: the bridge still holds it.
// The bridge process itself runs max_in_flight calls at once and queues the rest. A
// second after a burst the heap is handed back to the system (malloc_trim).
//
// A cell's calls still in flight at its deadline are abandoned: each is answered with an
// error at once (so the threads waiting in the cell go on), its real answer dropped when
// it comes, and their number goes in the cell's result.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "isolation/sys/unique_fd.h"
#include "runtime/protocol/frame.h"
#include "runtime/supervisor/event_loop.h"
#include "runtime/supervisor/helper_process.h"
#include "runtime/core/tools_config.h"

namespace nsbox {

struct ToolBridgeSetup {
  std::string sandbox_id;
  std::string program;     // libexec/nsbox/nsbox-toolbridge
  std::string log_file;    // <run>/sandboxes/<id>/tools.log
  std::string shared_dir;  // <data>/shared/<id>: host copies of upload_local_file
  pid_t init_pid = 0;      // the sandbox's root is /proc/<init_pid>/root
  uid_t uid = 0;           // the sandbox user's host ids
  gid_t gid = 0;
  ToolsConfig config;
  ToolKeys keys;
};

class ToolBridge {
 public:
  static constexpr size_t kMaxPending = 1024;
  static constexpr double kRatePerSecond = 1000;
  static constexpr double kRateBurst = 2000;
  static constexpr size_t kMaxHeldBytes = 16u << 20;
  static constexpr int kMaxStarts = 5;

  // answer: {"result": ..., "error": null | "..."}; called exactly once, maybe at once.
  using Reply = std::function<void(const protocol::Json& answer)>;
  // Sends an event to a client of the supervisor (no-op if it is gone).
  using SendToClient = std::function<void(int client_fd, const protocol::Json& event)>;

  ToolBridge(EventLoop& loop, ToolBridgeSetup setup, SendToClient send)
      : loop_(loop), setup_(std::move(setup)), send_(std::move(send)) {}
  ~ToolBridge() { stop(); }
  ToolBridge(const ToolBridge&) = delete;
  ToolBridge& operator=(const ToolBridge&) = delete;

  // A call made during cell `cell` (0: from outside any cell: the socket).
  void call(const std::string& helper, protocol::Json args, uint64_t cell, Reply reply);
  // Answers each call of `cell` still outstanding with an error; returns how many.
  size_t abandon(uint64_t cell);
  // The callback backend: `client_fd` receives {"event": "tool_call", "call_id", "cell",
  // "helper", "args"} for each call from now on (a later subscriber replaces it), and any
  // client answers with answer(). A call unanswered after call_timeout_s is an error.
  Result<void> subscribe(int client_fd);  // refused unless the backend is callback
  void client_gone(int client_fd);
  Result<void> answer(const std::string& call_id, const protocol::Json& result, const protocol::Json& error);
  // The process goes, outstanding calls are dropped unanswered (their askers are going too).
  void stop();
  // The sandbox's tool traffic held `bytes` elsewhere (a frame read from the socket, a
  // connection's buffers) and freed them: counted towards handing the heap back.
  void released(size_t bytes);

 private:
  struct Pending {
    uint64_t cell = 0;
    Reply reply;
    bool embedder = false;  // the callback backend's, else the bridge process's
    int timer = -1;         // an embedder's call's deadline
  };
  void call_embedder(const std::string& helper, protocol::Json args, uint64_t cell, Reply reply);
  Reply take(std::map<uint64_t, struct Pending>::iterator it);
  Result<void> spawn();
  void on_readable();
  void on_exit();
  void flush();
  bool rate_allows();
  void forget_held();
  void trim_soon(size_t bytes);
  void fail_all(const std::string& why);

  EventLoop& loop_;
  ToolBridgeSetup setup_;
  SendToClient send_;
  int subscriber_ = -1;
  HelperProcess process_;
  UniqueFd channel_;
  protocol::FrameReader reader_{protocol::kMaxClientFrame};
  std::string out_;  // frames not yet taken by the bridge
  std::map<uint64_t, Pending> pending_;
  std::map<uint64_t, size_t> at_bridge_;  // the bridge process's unanswered calls, and their weight
  size_t held_ = 0;                       // their weights, summed
  size_t since_trim_ = 0;                 // bytes of calls and answers since the heap was last trimmed
  int trim_timer_ = -1;
  uint64_t next_call_ = 1;
  int starts_ = 0;
  double tokens_ = kRateBurst;
  std::chrono::steady_clock::time_point refilled_ = std::chrono::steady_clock::now();
};

}  // namespace nsbox
