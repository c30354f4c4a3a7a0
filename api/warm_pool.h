// The warm pool of `nsbox serve --warm SIZE=N` (docs/semantics.md, "Warm pool"): ready
// sandboxes per size, their kernels started with the preload list imported, claimed by the
// creates they can serve and refilled in the background.
//
// Members are real sandboxes, made by Runtime::create with `pool` set: every isolation
// property and limit holds for them. While they wait they run at the least CPU weight,
// and the refill waits (a bounded while) for a moment without cells or commands, and
// 100 ms after a member is taken (its creator's first cell follows), so that building them
// does not slow live work. A member is handed out only once its kernel is
// idle, i.e. has imported the preload list.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "api/exchange.h"
#include "runtime/client/runtime.h"

namespace nsbox::api {

struct WarmPoolConfig {
  static constexpr size_t kMaxPerSize = 256;
  std::map<SizeTier, size_t> sizes;  // ready members wanted per size; empty: no pool
  std::vector<std::string> preload = {"numpy", "pandas", "matplotlib"};
  bool memory_merge = false;  // `--memory-merge`: the members' preloaded heap offered to KSM

  // "standard=2,large=1" and "numpy,pandas" (or "none"): checked, with the flag named.
  static Result<WarmPoolConfig> parse(const std::string& warm, const std::optional<std::string>& preload);
  // {"standard": 4, "large": 0}: PUT /v1/pool's sizes, with the same bounds as --warm.
  static Result<std::map<SizeTier, size_t>> sizes_from_json(const Json& j);
};

class WarmPool {
 public:
  // `base(size)`: a default create of that size as this server makes it (its tools
  // config included). `busy()`: whether cells or commands run now (the refill yields).
  // `reserve()`: room for one more sandbox here (--capacity), held until `release()`;
  // false: the refill waits.
  WarmPool(Runtime& runtime, WarmPoolConfig config, std::function<Result<CreateOptions>(SizeTier)> base,
           std::function<bool()> busy, std::function<bool()> reserve = [] { return true; },
           std::function<void()> release = [] {});
  ~WarmPool();
  WarmPool(const WarmPool&) = delete;
  WarmPool& operator=(const WarmPool&) = delete;

  // The tag in a member's record: this server's.
  static std::string owner_tag();
  // Removes the free members whose server is gone (a server that was SIGKILLed).
  static void sweep_orphans(Runtime& runtime);

  void start();
  bool serves(SizeTier size) const;
  // PUT /v1/pool: new targets for the sizes given (0 ends a size's pool); members beyond
  // a lowered target are removed. The refill starts with the first target.
  void set_targets(const std::map<SizeTier, size_t>& targets);
  // A ready member of `size` (the caller claims it), or none.
  std::optional<std::string> take(SizeTier size);
  bool is_free(const std::string& id) const;  // ready and not taken
  // A member taken but not claimed (the claim failed for the caller's own reason).
  void give_back(SizeTier size, const std::string& id);
  // A member taken and not handed out (its claim failed): removed if it is still this
  // server's free member; one started again or claimed elsewhere is left alone.
  void discard(const std::string& id);
  // Ends the refill and removes every free member.
  void stop();
  // {"sizes": {"standard": {"target": 2, "ready": 1, "building": true}}, "preload": [...], "memory_merge": false}
  Json status() const;

 private:
  struct Slot {
    size_t target = 0;
    std::deque<std::string> ready;
    bool building = false;
  };
  void fill();
  Result<std::string> build(SizeTier size);
  bool wait_for(std::chrono::milliseconds d);  // false: stopping

  Runtime& runtime_;
  WarmPoolConfig config_;
  std::function<Result<CreateOptions>(SizeTier)> base_;
  std::function<bool()> busy_, reserve_;
  std::function<void()> release_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::map<SizeTier, Slot> slots_;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point last_take_;  // of a member handed out
  std::thread filler_;
};

}  // namespace nsbox::api
