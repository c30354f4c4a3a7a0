// The HTTP server's worker threads (api/worker_pool.h): every job runs, one that blocks
// never holds up another, and a finished thread takes the next job instead of a new one.
#include "api/worker_pool.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

using namespace std::chrono_literals;

namespace {

// Until `done()` or 10 s.
template <typename F>
bool eventually(F done) {
  for (int i = 0; i < 1000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return done();
}

}  // namespace

TEST_CASE("worker pool: jobs that block all run at once, each on a thread of its own") {
  nsbox::api::WorkerPool pool(4, 5s);
  constexpr int kJobs = 20;  // more than the idle threads kept
  std::mutex m;
  std::condition_variable cv;
  int waiting = 0;
  bool release = false;
  std::atomic<int> finished = 0;
  for (int i = 0; i < kJobs; ++i)
    pool.run([&] {
      {
        std::unique_lock lock(m);
        ++waiting;
        cv.notify_all();
        cv.wait_for(lock, 10s, [&] { return release; });
      }
      ++finished;  // last: the test may end (and its locals go) once all have counted
    });
  {
    std::unique_lock lock(m);
    CHECK(cv.wait_for(lock, 10s, [&] { return waiting == kJobs; }));  // none waited for another
    release = true;
    cv.notify_all();
  }
  CHECK(eventually([&] { return finished == kJobs; }));
}

TEST_CASE("worker pool: a finished thread takes the next job") {
  nsbox::api::WorkerPool pool(2, 5s);
  std::mutex m;
  std::set<std::thread::id> threads;
  std::atomic<int> done = 0;
  for (int i = 0; i < 10; ++i) {
    int before = done;
    pool.run([&] {
      {
        std::lock_guard lock(m);
        threads.insert(std::this_thread::get_id());
      }
      ++done;
    });
    REQUIRE(eventually([&] { return done == before + 1 && pool.idle_threads() == 1; }));  // back waiting
  }
  std::lock_guard lock(m);
  CHECK(threads.size() == 1);  // one after another: always the same thread
}

TEST_CASE("worker pool: an idle thread ends after its idle time, and at most the kept number wait") {
  nsbox::api::WorkerPool pool(1, 200ms);
  std::atomic<int> done = 0;
  for (int i = 0; i < 3; ++i) pool.run([&] { ++done; });
  CHECK(eventually([&] { return done == 3; }));
  CHECK(pool.idle_threads() <= 1);
  CHECK(eventually([&] { return pool.idle_threads() == 0; }));  // its 200 ms are up
}
