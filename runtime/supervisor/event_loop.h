// A minimal epoll loop: callbacks per fd, one-shot timers on timerfds.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox {

class EventLoop {
 public:
  using Callback = std::function<void(uint32_t events)>;

  static Result<EventLoop> create();

  Result<void> add(int fd, uint32_t events, Callback cb);
  Result<void> modify(int fd, uint32_t events);
  void remove(int fd);

  // A one-shot timer; returns its id (a timerfd owned by the loop). cancel_timer is safe
  // to call for a timer that already fired.
  Result<int> add_timer(uint64_t after_ms, std::function<void()> cb);
  void cancel_timer(int timer_id);

  // Runs until stop(); callbacks may add and remove fds.
  Result<void> run();
  void stop() { stopped_ = true; }

 private:
  UniqueFd epoll_;
  std::map<int, std::shared_ptr<Callback>> callbacks_;
  std::map<int, UniqueFd> timers_;
  bool stopped_ = false;
};

}  // namespace nsbox
