// The threads the HTTP server's requests are handled on (api/http_server.cc): a request's
// handler may block for a cell's whole life, so each has a thread of its own, but a thread
// that has finished stays for the next request a while instead of exiting, so a request
// does not pay a thread's creation, its stack's first touches and its exit (~0.4 ms of a
// claim's ~5 on the measured VM: docs/performance.md, "Warm starts").
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

namespace nsbox::api {

class WorkerPool {
 public:
  // At most `idle_kept` threads wait for work, each at most `idle_for`.
  WorkerPool(size_t idle_kept, std::chrono::milliseconds idle_for);
  ~WorkerPool();  // idle threads end; busy ones end after their job
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Runs `job` on an idle thread, or on a new one (never waits: the caller bounds how
  // many jobs run at once). A thread that cannot be made throws, as std::thread does.
  void run(std::function<void()> job);

  size_t idle_threads() const;  // waiting for work now

 private:
  struct State {
    std::mutex m;
    std::condition_variable wake;
    std::deque<std::function<void()>> queue;
    size_t idle = 0;
    bool stopping = false;
    size_t idle_kept;
    std::chrono::milliseconds idle_for;
  };
  static void work(std::shared_ptr<State> state, std::function<void()> job);

  std::shared_ptr<State> state_;  // shared with the threads, which may outlive the pool
};

}  // namespace nsbox::api
