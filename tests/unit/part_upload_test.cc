// The part plan and the parallel part loop that S3 multipart uploads and Azure block
// uploads share: how a size is cut, that each part goes up once, how many at a time, and
// what a failure stops.
#include <sys/syscall.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mounts/bucket/part_upload.h"

using namespace nsbox;
using namespace nsbox::bucket;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t kMiB = 1 << 20;

// Polls `done` until it holds or 5 s pass; whether it held.
template <class Pred>
bool eventually(Pred done) {
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// The parts a run of upload_parts was asked to send, in the order they were handed out.
struct SentParts {
  std::mutex mutex;
  std::vector<uint64_t> indexes;
  void add(uint64_t index) {
    std::lock_guard lock(mutex);
    indexes.push_back(index);
  }
  std::vector<uint64_t> sorted() {
    std::lock_guard lock(mutex);
    auto copy = indexes;
    std::sort(copy.begin(), copy.end());
    return copy;
  }
};

// The calling thread's id, and whether such a thread has ended: a worker of upload_parts
// ends right after it recorded its part's failure, so its end is the marker that the
// failure is seen (where a fixed sleep would only make that likely).
pid_t this_thread_id() { return static_cast<pid_t>(::syscall(SYS_gettid)); }
bool thread_ended(pid_t tid) { return ::access(("/proc/self/task/" + std::to_string(tid)).c_str(), F_OK) != 0; }

Error refused(uint64_t index) { return make_error(ErrorCode::kRemote, "part " + std::to_string(index) + " refused"); }

}  // namespace

TEST_CASE("a size is cut into equal whole-MiB parts, no smaller than the minimum and no more than the maximum count") {
  SECTION("small uploads use the minimum part size") {
    PartPlan plan = plan_parts(40 * kMiB, 8 * kMiB, 10000);
    CHECK(plan.part_size == 8 * kMiB);
    CHECK(plan.count == 5);
    CHECK(plan_parts(40 * kMiB + 1, 8 * kMiB, 10000).count == 6);
  }
  SECTION("large uploads grow the parts to stay under the count, rounded up to a MiB") {
    PartPlan s3 = plan_parts(200ull << 30, 8 * kMiB, 10000);  // 20.48 MiB a part at least
    CHECK(s3.part_size == 21 * kMiB);
    CHECK(s3.count == 9753);
    PartPlan azure = plan_parts(1ull << 40, 8 * kMiB, 50000);  // 20.97 MiB a part at least
    CHECK(azure.part_size == 21 * kMiB);
    CHECK(azure.count == 49933);
  }
  SECTION("whatever the size, the parts cover it exactly") {
    const std::vector<uint64_t> sizes = {16 * kMiB + 1, 80000 * kMiB + 1, (5ull << 40) - 1, 78125 * kMiB * 10000 + 7};
    for (uint64_t size : sizes) {
      PartPlan plan = plan_parts(size, 8 * kMiB, 10000);
      INFO("size " << size);
      CHECK(plan.part_size >= 8 * kMiB);
      CHECK(plan.part_size % kMiB == 0);
      CHECK(plan.count <= 10000);
      CHECK(plan.part_size * plan.count >= size);
      CHECK(plan.part_size * (plan.count - 1) < size);
    }
  }
}

TEST_CASE("on success every part is sent once, and the parts tile the source") {
  const PartPlan plan{1000, 10};
  const uint64_t size = 9500;  // the last part is 500 bytes
  std::mutex mutex;
  std::vector<int> times_sent(plan.count, 0);
  std::vector<std::pair<uint64_t, uint64_t>> ranges(plan.count);
  auto result = upload_parts(plan, size, 4, [&](uint64_t index, uint64_t offset, uint64_t length) -> Result<void> {
    std::lock_guard lock(mutex);
    ++times_sent.at(index);
    ranges.at(index) = {offset, length};
    return {};
  });
  REQUIRE(result);
  CHECK(times_sent == std::vector<int>(plan.count, 1));
  for (uint64_t i = 0; i < plan.count; ++i) {
    CHECK(ranges[i].first == i * 1000);
    CHECK(ranges[i].second == (i + 1 < plan.count ? 1000 : 500));
  }
}

TEST_CASE("at most `parallel` parts are in flight at once, and that many are") {
  const PartPlan plan{1, 24};
  const int parallel = 3;
  std::atomic<int> in_flight{0};
  std::atomic<int> most{0};
  auto result = upload_parts(plan, plan.count, parallel, [&](uint64_t, uint64_t, uint64_t) -> Result<void> {
    int now = ++in_flight;
    int seen = most.load();
    while (now > seen && !most.compare_exchange_weak(seen, now)) {
    }
    // Hold each part until `parallel` are in flight (or a while), so that a loop that
    // ran more, or fewer, at once would show it.
    eventually([&] { return most.load() >= parallel; });
    std::this_thread::sleep_for(2ms);
    --in_flight;
    return {};
  });
  REQUIRE(result);
  CHECK(most.load() == parallel);
}

TEST_CASE("fewer parts than threads start no idle thread and send each part once") {
  SentParts sent;
  auto result = upload_parts(PartPlan{10, 2}, 15, 4, [&](uint64_t index, uint64_t, uint64_t) -> Result<void> {
    sent.add(index);
    return {};
  });
  REQUIRE(result);
  CHECK(sent.sorted() == std::vector<uint64_t>{0, 1});
}

TEST_CASE("after a part fails, no further part is handed out and that failure is the error") {
  SECTION("one at a time: the parts after the failed one are never sent") {
    SentParts sent;
    auto result = upload_parts(PartPlan{10, 10}, 100, 1, [&](uint64_t index, uint64_t, uint64_t) -> Result<void> {
      sent.add(index);
      if (index == 2) return fail(refused(index));
      return {};
    });
    REQUIRE_FALSE(result);
    CHECK(result.error().message == "part 2 refused");
    CHECK(sent.sorted() == std::vector<uint64_t>{0, 1, 2});
  }
  SECTION("in parallel: parts in flight finish, and none is started after the failure") {
    const int parallel = 4;
    SentParts sent;
    std::atomic<int> started{0};
    std::atomic<pid_t> part0_thread{0};
    std::atomic<bool> all_started{false};
    std::atomic<int> saw_failure{0};
    auto send_part = [&](uint64_t index, uint64_t, uint64_t) -> Result<void> {
      sent.add(index);
      ++started;
      if (index == 0) {
        all_started = eventually([&] { return started.load() == parallel; });
        part0_thread = this_thread_id();
        return fail(refused(index));
      }
      // Parts 1 to 3 were handed out before the failure; they end once it is recorded (the
      // thread that sent part 0 has ended).
      if (eventually([&] { return part0_thread.load() != 0 && thread_ended(part0_thread.load()); })) ++saw_failure;
      return {};
    };
    auto result = upload_parts(PartPlan{10, 100}, 1000, parallel, send_part);
    REQUIRE_FALSE(result);
    CHECK(all_started);
    CHECK(saw_failure == parallel - 1);
    CHECK(result.error().message == "part 0 refused");
    CHECK(sent.sorted() == std::vector<uint64_t>{0, 1, 2, 3});
  }
  SECTION("of several failures, the first one is returned") {
    std::atomic<pid_t> part1_thread{0};
    std::atomic<bool> part0_waited{false};
    auto result = upload_parts(PartPlan{10, 2}, 20, 2, [&](uint64_t index, uint64_t, uint64_t) -> Result<void> {
      if (index == 1) {
        part1_thread = this_thread_id();
        return fail(refused(index));
      }
      // Part 0 fails only once part 1's failure is recorded: its thread has ended.
      part0_waited = eventually([&] { return part1_thread.load() != 0 && thread_ended(part1_thread.load()); });
      return fail(refused(index));
    });
    REQUIRE_FALSE(result);
    CHECK(part0_waited);
    CHECK(result.error().message == "part 1 refused");
  }
}
