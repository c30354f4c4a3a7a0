#include "api/warm_pool.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <string_view>

#include "isolation/sys/log.h"

namespace nsbox::api {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::string_view kOwnerPrefix = "nsbox-server:";
using std::chrono::milliseconds;

// How long a member's kernel may take to import the preload list (matplotlib's first
// import alone is ~0.4 s on a quiet machine; the member runs at the least CPU weight).
constexpr auto kReadyBound = std::chrono::seconds(120);
// The refill waits for a moment without cells this long at most, then builds anyway (at
// the least CPU weight): a server that is never idle still gets its pool back.
constexpr auto kYieldBound = std::chrono::seconds(5);
// A claim is followed at once by its creator's first cell: the refill lets that cell have
// the machine (on 2 cores, building a member beside it cost the first result ~1 ms).
constexpr auto kClaimGrace = milliseconds(100);
constexpr auto kRetryFirst = milliseconds(500);
constexpr auto kRetryMax = std::chrono::seconds(30);

Result<std::vector<std::string>> split_list(const std::string& text, const char* flag) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= text.size()) {
    size_t comma = text.find(',', at);
    std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (item.empty())
      return fail(make_error(ErrorCode::kInvalidArgument, std::string(flag) + ": an empty item in '" + text + "'"));
    out.push_back(std::move(item));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

bool is_module_name(const std::string& name) {
  if (name.empty() || name.size() > 128 || name.front() == '.' || name.back() == '.' || std::isdigit(static_cast<unsigned char>(name.front())))
    return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.') return false;
  return name.find("..") == std::string::npos;
}

}  // namespace

Result<WarmPoolConfig> WarmPoolConfig::parse(const std::string& warm, const std::optional<std::string>& preload) {
  WarmPoolConfig c;
  for (const auto& item : warm.empty() ? std::vector<std::string>{} : NSBOX_TRY(split_list(warm, "--warm"))) {
    size_t eq = item.find('=');
    auto bad = [&] {
      return fail(make_error(ErrorCode::kInvalidArgument, "--warm: '" + item + "' is not SIZE=N",
                             "e.g. --warm standard=4,large=1 (sizes: standard, medium, large, xlarge; N at most 256)"));
    };
    if (eq == std::string::npos) return bad();
    auto size = parse_size_tier(item.substr(0, eq));
    if (!size) return fail(std::move(size.error()).context("--warm"));
    std::string n = item.substr(eq + 1);
    if (n.empty() || n.size() > 3 || n.find_first_not_of("0123456789") != std::string::npos || std::stoul(n) > kMaxPerSize) return bad();
    if (c.sizes.count(*size)) return fail(make_error(ErrorCode::kInvalidArgument, "--warm: size " + item.substr(0, eq) + " given twice"));
    if (std::stoul(n) > 0) c.sizes[*size] = std::stoul(n);
  }
  if (preload) {
    c.preload.clear();
    if (*preload != "none")
      for (auto& name : NSBOX_TRY(split_list(*preload, "--preload"))) {
        if (!is_module_name(name))
          return fail(make_error(ErrorCode::kInvalidArgument, "--preload: '" + name + "' is not a module name",
                                 "e.g. --preload numpy,pandas, or --preload none"));
        c.preload.push_back(std::move(name));
      }
  }
  return c;
}

Result<std::map<SizeTier, size_t>> WarmPoolConfig::sizes_from_json(const Json& j) {
  if (!j.is_object())
    return fail(make_error(ErrorCode::kMalformedRequest, "\"sizes\" must be an object: {\"standard\": 4, \"large\": 0}"));
  std::map<SizeTier, size_t> out;
  for (const auto& [name, n] : j.items()) {
    auto size = NSBOX_TRY(parse_size_tier(name));
    if (!n.is_number_integer() || n.get<int64_t>() < 0 || n.get<int64_t>() > static_cast<int64_t>(kMaxPerSize))
      return fail(make_error(ErrorCode::kMalformedRequest, "the pool of " + name + " must be a number from 0 to " + std::to_string(kMaxPerSize)));
    out[size] = static_cast<size_t>(n.get<int64_t>());
  }
  return out;
}

WarmPool::WarmPool(Runtime& runtime, WarmPoolConfig config, std::function<Result<CreateOptions>(SizeTier)> base,
                   std::function<bool()> busy, std::function<bool()> reserve, std::function<void()> release)
    : runtime_(runtime), config_(std::move(config)), base_(std::move(base)), busy_(std::move(busy)),
      reserve_(std::move(reserve)), release_(std::move(release)) {
  for (const auto& [size, n] : config_.sizes) slots_[size].target = n;
}

WarmPool::~WarmPool() { stop(); }

std::string WarmPool::owner_tag() { return std::string(kOwnerPrefix) + std::to_string(::getpid()); }

void WarmPool::sweep_orphans(Runtime& runtime) {
  auto list = runtime.list();
  if (!list) return;
  for (const auto& info : *list) {
    const std::string& owner = info.record.facts.pool;
    if (!owner.starts_with(kOwnerPrefix)) continue;  // not a member (or not a server's)
    pid_t pid = static_cast<pid_t>(std::atoi(owner.c_str() + kOwnerPrefix.size()));
    bool server_lives = pid > 0 && pid != ::getpid() && (::kill(pid, 0) == 0 || errno == EPERM);
    // A live server's members are its own, unless their supervisor is gone (no use to anyone).
    if (server_lives && info.status == SandboxStatus::kRunning) continue;
    if (auto removed = runtime.remove(info.record.id); !removed)
      log::warn("could not remove " + info.record.id + ", a warm pool member left by " + owner + ": " + removed.error().message);
    else
      log::info("removed " + info.record.id + ", a warm pool member left by " + owner);
  }
}

void WarmPool::start() {
  std::lock_guard lock(mutex_);
  if (slots_.empty() || filler_.joinable() || stopping_) return;
  filler_ = std::thread([this] { fill(); });
}

bool WarmPool::serves(SizeTier size) const {
  std::lock_guard lock(mutex_);
  auto slot = slots_.find(size);
  return slot != slots_.end() && slot->second.target > 0;
}

void WarmPool::set_targets(const std::map<SizeTier, size_t>& targets) {
  std::vector<std::string> surplus;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [size, n] : targets) {
      Slot& slot = slots_[size];
      slot.target = n;
      while (slot.ready.size() > n) {
        surplus.push_back(std::move(slot.ready.back()));
        slot.ready.pop_back();
      }
    }
    wake_.notify_all();
  }
  start();
  for (const auto& id : surplus) discard(id);
}

std::optional<std::string> WarmPool::take(SizeTier size) {
  std::optional<std::string> taken;
  std::vector<std::string> dead;  // members whose supervisor went while they waited
  {
    std::lock_guard lock(mutex_);
    auto slot = slots_.find(size);
    while (slot != slots_.end() && !slot->second.ready.empty() && !taken) {
      std::string id = std::move(slot->second.ready.front());
      slot->second.ready.pop_front();
      if (runtime_.store().supervisor_alive(id)) taken = std::move(id);
      else dead.push_back(std::move(id));
    }
    if (taken) last_take_ = Clock::now();
    wake_.notify_all();
  }
  for (const auto& id : dead) discard(id);
  return taken;
}

// A member that will not be handed out: removed if it is still ours and free (one that
// someone started again, or claimed through another path, is left alone).
void WarmPool::discard(const std::string& id) {
  auto record = runtime_.store().load(id);
  if (!record || record->facts.pool != owner_tag()) return;
  if (auto removed = runtime_.remove(id); !removed) log::warn("could not remove warm pool member " + id + ": " + removed.error().message);
}

bool WarmPool::is_free(const std::string& id) const {
  std::lock_guard lock(mutex_);
  for (const auto& [size, slot] : slots_)
    if (std::find(slot.ready.begin(), slot.ready.end(), id) != slot.ready.end()) return true;
  return false;
}

void WarmPool::give_back(SizeTier size, const std::string& id) {
  {
    std::lock_guard lock(mutex_);
    if (!stopping_) {
      slots_[size].ready.push_front(id);
      return;
    }
  }
  discard(id);  // stop() has removed the others already
}

void WarmPool::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && !filler_.joinable()) return;  // stopped: nothing is added after (start() refuses, give_back discards)
    stopping_ = true;
    wake_.notify_all();
  }
  if (filler_.joinable()) filler_.join();  // a member being built is finished, then removed below
  std::vector<std::string> left;
  {
    std::lock_guard lock(mutex_);
    for (auto& [size, slot] : slots_) {
      left.insert(left.end(), slot.ready.begin(), slot.ready.end());
      slot.ready.clear();
    }
  }
  for (const auto& id : left) discard(id);
}

Json WarmPool::status() const {
  std::lock_guard lock(mutex_);
  Json sizes = Json::object();
  for (const auto& [size, slot] : slots_)
    sizes[std::string(size_tier_name(size))] = {{"target", slot.target}, {"ready", slot.ready.size()}, {"building", slot.building}};
  return {{"sizes", sizes}, {"preload", config_.preload}, {"memory_merge", config_.memory_merge}};
}

bool WarmPool::wait_for(milliseconds d) {
  std::unique_lock lock(mutex_);
  wake_.wait_for(lock, d, [&] { return stopping_; });
  return !stopping_;
}

// One member at a time, the emptiest size first.
void WarmPool::fill() {
  auto retry = kRetryFirst;
  for (;;) {
    std::optional<SizeTier> wanted;
    {
      std::unique_lock lock(mutex_);
      auto short_of = [&] {
        wanted.reset();
        size_t best = 0;
        for (auto& [size, slot] : slots_)
          if (slot.ready.size() < slot.target && slot.target - slot.ready.size() > best) {
            best = slot.target - slot.ready.size();
            wanted = size;
          }
        return wanted.has_value();
      };
      wake_.wait(lock, [&] { return stopping_ || short_of(); });
      if (stopping_) return;
      slots_[*wanted].building = true;
    }
    auto just_taken = [&] {
      std::lock_guard lock(mutex_);
      return Clock::now() - last_take_ < kClaimGrace;
    };
    for (auto until = Clock::now() + kYieldBound; (busy_() || just_taken()) && Clock::now() < until;)
      if (!wait_for(milliseconds(20))) break;
    // A member is a sandbox of this machine: it waits for room under --capacity.
    bool room = false;
    while (!(room = reserve_()) && wait_for(milliseconds(250))) {
    }
    if (!room) {
      std::lock_guard lock(mutex_);
      slots_[*wanted].building = false;
      return;  // stopping
    }
    auto built = build(*wanted);
    release_();
    bool surplus = false;  // the target was lowered (PUT /v1/pool) while it was built
    {
      std::lock_guard lock(mutex_);
      Slot& slot = slots_[*wanted];
      slot.building = false;
      if (built && slot.ready.size() < slot.target) slot.ready.push_back(*built);
      else surplus = built.has_value();
    }
    if (surplus) discard(*built);
    if (built) {
      retry = kRetryFirst;
      continue;
    }
    log::limited(log::Level::kWarn, "warm-pool", "could not make a warm " + std::string(size_tier_name(*wanted)) +
                                                     " sandbox (next try in " + std::to_string(retry.count()) + " ms): " + built.error().message);
    if (!wait_for(retry)) return;
    retry = std::min<milliseconds>(retry * 2, kRetryMax);
  }
}

// A member: made, then ready once its kernel has imported the preload list.
Result<std::string> WarmPool::build(SizeTier size) {
  CreateOptions options = NSBOX_TRY(base_(size));
  options.pool = owner_tag();
  options.spec.preload = config_.preload;
  options.spec.memory_merge = config_.memory_merge;
  auto info = NSBOX_TRY(runtime_.create(options));
  const std::string& id = info.record.id;
  auto drop = [&](Error e) -> Result<std::string> {
    (void)runtime_.remove(id);
    return fail(std::move(e));
  };
  for (auto until = Clock::now() + kReadyBound;;) {
    auto now = runtime_.inspect(id);
    if (!now) return drop(std::move(now.error()));
    if (now->status != SandboxStatus::kRunning) return drop(make_error(ErrorCode::kSandboxDead, "warm sandbox " + id + " stopped while it was made"));
    if (now->kernel_state == "idle") return id;
    if (Clock::now() > until)
      return drop(make_error(ErrorCode::kTimeout, "the kernel of warm sandbox " + id + " did not import its preload list within 120 s"));
    if (!wait_for(milliseconds(20))) return drop(make_error(ErrorCode::kUnavailable, "the server is stopping"));
  }
}

}  // namespace nsbox::api
