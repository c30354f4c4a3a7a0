#include "runtime/supervisor/event_loop.h"

#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "isolation/sys/syscall.h"

namespace nsbox {

Result<EventLoop> EventLoop::create() {
  EventLoop loop;
  loop.epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!loop.epoll_) return fail(sys_error("epoll_create1"));
  return loop;
}

namespace {
uint64_t pack(int fd, uint32_t generation) { return (uint64_t{generation} << 32) | static_cast<uint32_t>(fd); }
}  // namespace

Result<void> EventLoop::add(int fd, uint32_t events, Callback cb) {
  uint32_t generation = next_generation_++;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = pack(fd, generation);
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return fail(sys_error("epoll_ctl ADD fd " + std::to_string(fd)));
  callbacks_[fd] = {generation, events, std::make_shared<Callback>(std::move(cb))};
  return {};
}

Result<void> EventLoop::modify(int fd, uint32_t events) {
  auto it = callbacks_.find(fd);
  if (it == callbacks_.end()) return fail(make_error(ErrorCode::kInternal, "modify an unregistered fd"));
  // Level-triggered, the same set again changes nothing (the kernel session sets its
  // three fds' interest after every write to the kernel: three syscalls a cell).
  if (events == it->second.events && !(events & (EPOLLET | EPOLLONESHOT))) return {};
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = pack(fd, it->second.generation);
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &ev) != 0) return fail(sys_error("epoll_ctl MOD fd " + std::to_string(fd)));
  it->second.events = events;
  return {};
}

void EventLoop::remove(int fd) {
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  callbacks_.erase(fd);
}

bool EventLoop::read_chunk(UniqueFd& pipe, std::string& out) {
  if (!pipe) return false;
  out.resize(64 << 10);
  ssize_t n = ::read(pipe.get(), out.data(), out.size());
  if (n < 0 && errno == EAGAIN) return false;
  if (n <= 0) {
    remove(pipe.get());
    pipe.reset();
    return false;
  }
  out.resize(static_cast<size_t>(n));
  return true;
}

Result<int> EventLoop::add_timer(uint64_t after_ms, std::function<void()> cb) {
  UniqueFd tfd(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
  if (!tfd) return fail(sys_error("timerfd_create"));
  itimerspec spec{};
  spec.it_value.tv_sec = static_cast<time_t>(after_ms / 1000);
  spec.it_value.tv_nsec = static_cast<long>((after_ms % 1000) * 1000000);
  if (after_ms == 0) spec.it_value.tv_nsec = 1;
  if (::timerfd_settime(tfd.get(), 0, &spec, nullptr) != 0) return fail(sys_error("timerfd_settime"));
  int id = tfd.get();
  NSBOX_CHECK(add(id, EPOLLIN, [this, id, cb = std::move(cb)](uint32_t) {
    cancel_timer(id);
    cb();
  }));
  timers_[id] = std::move(tfd);
  return id;
}

void EventLoop::cancel_timer(int timer_id) {
  if (!timers_.count(timer_id)) return;
  remove(timer_id);
  timers_.erase(timer_id);
}

Result<void> EventLoop::run() {
  epoll_event events[32];
  while (!stopped_) {
    int n = ::epoll_wait(epoll_.get(), events, 32, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(sys_error("epoll_wait"));
    }
    for (int i = 0; i < n && !stopped_; ++i) {
      int fd = static_cast<int>(events[i].data.u64 & 0xffffffffu);
      auto it = callbacks_.find(fd);
      // Removed by an earlier callback in this batch, or the number now belongs to another.
      if (it == callbacks_.end() || it->second.generation != events[i].data.u64 >> 32) continue;
      auto cb = it->second.callback;  // stays alive even if the callback removes itself
      (*cb)(events[i].events);
    }
    auto deferred = std::move(deferred_);
    deferred_.clear();
    for (auto& fn : deferred) fn();
  }
  return {};
}

}  // namespace nsbox
