// nsbox-toolbridge: the tool bridge of one sandbox (docs/tools.md). Started by the
// supervisor on the first helper call, on the host side; it holds the keys, calls the
// remotes and runs the local tools, so that nothing in the sandbox ever does.
//
//   stdin:  {"sandbox_id": ID, "tools": ToolsConfig, "keys": ToolKeys, "shared_dir": DIR,
//            "uid": N, "gid": N, "log_file": PATH}   (closed after; the copy in memory is wiped)
//   fd 3:   frames with the supervisor: {"call": N, "helper": "run_tool", "args": {...}}
//           in, {"call": N, "result": ..., "error": null|"..."} out, in any order
//   fd 4:   the sandbox's root (/proc/<init>/root, O_PATH), for upload_local_file
//   --list TOOLKIT SEARCH: prints the tool catalogue as JSON on stdout, and exits
//   stderr: the supervisor's log until "log_file" (<run>/sandboxes/<id>/tools.log,
//           rotated) is open; never a key (every line and answer is redacted)
//   environment: PATH, HOME and the proxy settings only
//
// Calls run on a pool of max_in_flight threads; more wait in a queue (bounded: the
// supervisor keeps at most kMaxPending outstanding, and ToolBridge::kMaxHeldBytes of
// them, weighed). EOF on fd 3 ends the process, and with it what is in flight: the
// supervisor is gone or stopping the sandbox.
//
// Memory: glibc gives each thread that allocates an arena of its own (up to 8 per core)
// and keeps what is freed in each for reuse: after a burst of 4 MiB calls the bridge held
// 1.3 GB with nothing in flight. Two arenas, large blocks mapped apart (returned when
// freed), and the heap trimmed whenever the pool goes idle after a burst. A running call
// holds copies of its arguments (its request's JSON and text), so calls start while the
// frames of those running stay under kMaxRunningBytes (one call always may).
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <iostream>
#include <iterator>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "isolation/sys/files.h"
#include "isolation/sys/log.h"
#include "runtime/protocol/frame.h"
#include "runtime/toolbridge/tool_router.h"
#include "isolation/sys/secret.h"

namespace {

using namespace nsbox;
using namespace nsbox::tools;
using protocol::Json;

constexpr int kChannelFd = 3;
constexpr int kRootFd = 4;
constexpr size_t kMaxQueued = 4096;
constexpr size_t kMaxRequestFrame = 8u << 20;
constexpr int kArenas = 2;
constexpr int kMappedFrom = 256 << 10;   // blocks this large are mmap()ed, and unmapped when freed
constexpr size_t kTrimAfterBytes = 8u << 20;  // of calls since the last trim, when the pool goes idle
constexpr size_t kMaxRunningBytes = 8u << 20;

// Every occurrence of a key in what leaves the bridge, replaced.
class Redactor {
 public:
  explicit Redactor(const ToolKeys& keys) {
    for (const std::string& k : {keys.composio_api_key, keys.llm_api_key, keys.link_key})
      if (k.size() >= 4) keys_.push_back(k);
  }
  std::string operator()(std::string text) const {
    for (const auto& k : keys_)
      for (size_t at = text.find(k); at != std::string::npos; at = text.find(k, at)) text.replace(at, k.size(), "[redacted]");
    return text;
  }

 private:
  std::vector<std::string> keys_;
};

// One frame to the supervisor, the keys taken out of its text. Blocking: the supervisor
// reads its side at once. A broken channel means the supervisor is gone: so do we.
void send_reply(const Json& reply, const Redactor& redact) {
  static std::mutex mutex;
  std::string body = redact(reply.dump(-1, ' ', false, Json::error_handler_t::replace));
  uint32_t n = static_cast<uint32_t>(body.size());
  std::string frame = {char(n >> 24), char(n >> 16), char(n >> 8), char(n)};
  frame += body;
  std::lock_guard lock(mutex);
  if (!files::write_all(kChannelFd, frame, "the supervisor's channel")) ::_exit(0);
}

struct Job {
  uint64_t call;
  ToolCall tool_call;
  size_t bytes = 0;  // its frame's
};

class Pool {
 public:
  Pool(ToolRouter& router, const Redactor& redact, unsigned threads) : router_(router), redact_(redact) {
    for (unsigned i = 0; i < threads; ++i) std::thread([this] { work(); }).detach();
  }

  void submit(Job job) {
    {
      std::lock_guard lock(mutex_);
      if (queue_.size() < kMaxQueued) {
        since_trim_ += job.bytes;
        queue_.push_back(std::move(job));
        ready_.notify_one();
        return;
      }
    }
    send(job.call, ToolAnswer::failed(job.tool_call.helper + ": too many calls are waiting in the bridge"));
  }

  void send(uint64_t call, ToolAnswer a) {
    Json reply = Json::object();  // the result moved in, not copied: it can be megabytes
    reply["call"] = call;
    reply["result"] = std::move(a.result);
    reply["error"] = a.error.empty() ? Json() : Json(a.error);
    send_reply(reply, redact_);
  }

 private:
  void work() {
    for (;;) {
      size_t bytes = 0;
      {
        Job job;
        {
          std::unique_lock lock(mutex_);
          ready_.wait(lock, [this] {
            return !queue_.empty() && (running_bytes_ == 0 || running_bytes_ + queue_.front().bytes <= kMaxRunningBytes);
          });
          job = std::move(queue_.front());
          queue_.pop_front();
          ++busy_;
          running_bytes_ += bytes = job.bytes;
        }
        send(job.call, router_.answer(job.tool_call));
      }  // the job's arguments freed before the heap is trimmed
      std::unique_lock lock(mutex_);
      running_bytes_ -= bytes;
      if (!queue_.empty()) ready_.notify_all();  // one may have waited for these bytes
      if (--busy_ > 0 || !queue_.empty() || since_trim_ < kTrimAfterBytes) continue;
      since_trim_ = 0;
      lock.unlock();
      ::malloc_trim(0);
    }
  }

  ToolRouter& router_;
  const Redactor& redact_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Job> queue_;
  unsigned busy_ = 0;
  size_t running_bytes_ = 0;
  size_t since_trim_ = 0;
};

struct Config {
  std::string sandbox_id;
  ToolsConfig tools;
  ToolKeys keys;
  std::string shared_dir;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string log_file;
};

Result<Config> read_config() {
  std::string input(std::istreambuf_iterator<char>(std::cin), {});
  Json j = Json::parse(input, nullptr, false);
  sys::wipe(input);
  if (!j.is_object()) return fail(make_error(ErrorCode::kProtocol, "nsbox-toolbridge: stdin is not a JSON object"));
  Config c;
  c.tools = NSBOX_TRY(ToolsConfig::from_json(j.value("tools", Json::object())));
  c.keys = ToolKeys::from_json(j.value("keys", Json()));
  c.shared_dir = j.value("shared_dir", "");
  c.sandbox_id = j.value("sandbox_id", "");
  c.uid = j.value("uid", 0u);
  c.gid = j.value("gid", 0u);
  c.log_file = j.value("log_file", "");
  if (j.contains("keys")) j["keys"] = nullptr;
  return c;
}

int list(Config& config, const std::string& toolkit, const std::string& search) {
  Redactor redact(config.keys);
  auto router = ToolRouter::create(config.tools, config.keys, nullptr);
  auto items = router ? (*router)->list(toolkit, search) : fail(std::move(router.error()));
  if (!items) {
    std::cout << Json{{"ok", false}, {"error", {{"code", error_code_name(items.error().code)},
                                                  {"message", redact(items.error().message)}, {"hint", items.error().hint}}}}
              << "\n";
    return 1;
  }
  std::cout << Json{{"ok", true}, {"tools", *items}}.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
  return 0;
}

int serve(Config& config) {
  if (!config.log_file.empty())
    if (auto opened = log::open_file(config.log_file); !opened) log::warn(opened.error().message);
  Redactor redact(config.keys);
  std::unique_ptr<SharedFiles> shared;
  if (::fcntl(kRootFd, F_GETFD) >= 0) {
    SharedFiles::Links links{config.sandbox_id, config.shared_dir, std::nullopt, config.keys.link_base_url};
    if (!config.keys.link_key.empty()) links.signer.emplace(links::LinkSigner::of_sandbox(config.keys.link_key, config.sandbox_id));
    shared = std::make_unique<SharedFiles>(SandboxFs(UniqueFd(kRootFd), config.uid, config.gid), std::move(links));
  }
  auto router = ToolRouter::create(config.tools, config.keys, std::move(shared));
  config.keys.wipe();
  if (!router) {
    // Every call gets the reason (a missing replay file, say), so the cell sees it.
    log::error(redact(router.error().message));
  }
  std::optional<Pool> pool;
  if (router) pool.emplace(**router, redact, config.tools.max_in_flight);
  for (;;) {
    // The supervisor sent it within these limits; checked again, as it costs nothing.
    auto frame = protocol::recv_frame(kChannelFd, kMaxRequestFrame, protocol::kUntrustedJson);
    if (!frame || !*frame) break;  // the supervisor is gone, or sent what it never sends
    Json& m = (*frame)->message;
    uint64_t call = m.value("call", uint64_t{0});
    ToolCall tool_call{m.value("helper", ""), Json::object()};
    if (auto args = m.find("args"); args != m.end()) tool_call.args = std::move(*args);  // one copy of it, not two
    if (!router) {
      send_reply({{"call", call}, {"result", nullptr},
                  {"error", tool_call.helper + ": the tool bridge could not start: " + router.error().message}},
                 redact);
      continue;
    }
    pool->submit({call, std::move(tool_call), (*frame)->bytes});
  }
  log::report_dropped();
  ::_exit(0);  // the pool's threads end with the process, mid-call or not
}

}  // namespace

int main(int argc, char** argv) {
  log::set_program("nsbox-toolbridge");
  ::signal(SIGPIPE, SIG_IGN);
  // Before any thread: arenas are made as threads first allocate.
  ::mallopt(M_ARENA_MAX, kArenas);
  ::mallopt(M_MMAP_THRESHOLD, kMappedFrom);  // fixed: else it grows to the largest block freed
  auto config = read_config();
  if (!config) {
    log::error(config.error().message);
    return 1;
  }
  if (argc == 4 && std::string(argv[1]) == "--list") return list(*config, argv[2], argv[3]);
  return serve(*config);
}
