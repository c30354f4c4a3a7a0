// A minimal epoll loop: callbacks per fd, one-shot timers on timerfds.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

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

  // Reads what a non-blocking pipe in the loop has (up to 64 KiB) into `out`: true if it
  // got bytes. At EOF or on an error the pipe leaves the loop and is closed.
  bool read_chunk(UniqueFd& pipe, std::string& out);

  // Runs `fn` after the callbacks of the current batch of events: for releasing objects
  // that callbacks further up the stack may still refer to.
  void defer(std::function<void()> fn) { deferred_.push_back(std::move(fn)); }

  // Runs until stop(); callbacks may add and remove fds.
  Result<void> run();
  void stop() { stopped_ = true; }

 private:
  struct Registration {
    uint32_t generation;
    uint32_t events;  // as last set: a modify to the same level-triggered set is no syscall
    std::shared_ptr<Callback> callback;
  };
  UniqueFd epoll_;
  // Events carry the fd and a generation, so that an event queued for an fd that was
  // closed earlier in the same batch never reaches a new registration of that number.
  std::map<int, Registration> callbacks_;
  uint32_t next_generation_ = 1;
  std::map<int, UniqueFd> timers_;
  std::vector<std::function<void()>> deferred_;
  bool stopped_ = false;
};

}  // namespace nsbox
