#include "api/worker_pool.h"

#include <thread>
#include <utility>

namespace nsbox::api {

WorkerPool::WorkerPool(size_t idle_kept, std::chrono::milliseconds idle_for) : state_(std::make_shared<State>()) {
  state_->idle_kept = idle_kept;
  state_->idle_for = idle_for;
}

WorkerPool::~WorkerPool() {
  std::lock_guard lock(state_->m);
  state_->stopping = true;
  state_->wake.notify_all();
}

void WorkerPool::run(std::function<void()> job) {
  {
    std::lock_guard lock(state_->m);
    if (state_->idle > state_->queue.size()) {
      state_->queue.push_back(std::move(job));
      state_->wake.notify_one();
      return;
    }
  }
  std::thread(work, state_, std::move(job)).detach();
}

size_t WorkerPool::idle_threads() const {
  std::lock_guard lock(state_->m);
  return state_->idle;
}

void WorkerPool::work(std::shared_ptr<State> state, std::function<void()> job) {
  for (;;) {
    job();
    job = nullptr;  // what it captured goes now, not when the next job comes
    std::unique_lock lock(state->m);
    if (state->stopping || state->idle >= state->idle_kept) return;
    ++state->idle;
    bool got = state->wake.wait_for(lock, state->idle_for, [&] { return state->stopping || !state->queue.empty(); });
    --state->idle;
    if (!got || state->queue.empty()) return;  // idle too long, or stopping
    job = std::move(state->queue.front());
    state->queue.pop_front();
  }
}

}  // namespace nsbox::api
