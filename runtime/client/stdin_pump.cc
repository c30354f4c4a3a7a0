#include "runtime/client/stdin_pump.h"

#include <fcntl.h>
#include <unistd.h>

namespace nsbox {

namespace {
constexpr size_t kChunk = 64 << 10;
}

Result<StdinPump> StdinPump::open(int source_fd) {
  StdinPump p;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return fail(sys_error("pipe2 for stdin"));
  p.read_end_.reset(fds[0]);
  p.write_end_.reset(fds[1]);
  ::fcntl(p.write_end_.get(), F_SETFL, O_NONBLOCK);
  p.source_ = source_fd;
  p.source_open_ = true;
  return p;
}

pollfd StdinPump::source_poll() const {
  bool want = source_open_ && buffer_.empty() && write_end_;
  return {want ? source_ : -1, POLLIN, 0};
}

pollfd StdinPump::sink_poll() const { return {!buffer_.empty() && write_end_ ? write_end_.get() : -1, POLLOUT, 0}; }

void StdinPump::pump(short source_revents, short sink_revents) {
  if (source_revents & (POLLIN | POLLHUP | POLLERR)) {
    char buf[kChunk];
    ssize_t n = ::read(source_, buf, sizeof buf);
    if (n > 0) buffer_.append(buf, static_cast<size_t>(n));
    else if (n == 0 || errno != EAGAIN) source_open_ = false;
  }
  if ((sink_revents & POLLOUT) && !buffer_.empty()) {
    ssize_t n = ::write(write_end_.get(), buffer_.data(), buffer_.size());
    if (n > 0) buffer_.erase(0, static_cast<size_t>(n));
    else if (n < 0 && errno != EAGAIN) stop();  // the command closed its stdin
  }
  if (sink_revents & (POLLERR | POLLHUP)) stop();
  if (!source_open_ && buffer_.empty()) write_end_.reset();  // EOF for the command
}

void StdinPump::stop() {
  source_open_ = false;
  buffer_.clear();
  write_end_.reset();
  read_end_.reset();
}

}  // namespace nsbox
