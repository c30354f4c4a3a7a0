#include "api/request_exchange.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "api/api_service.h"
#include "api/http_errors.h"

namespace nsbox::api {
namespace {

void signal_eventfd(int fd) {
  uint64_t one = 1;
  (void)!::write(fd, &one, sizeof one);
}

}  // namespace

Result<std::shared_ptr<RequestExchange>> RequestExchange::make(HttpRequest request, std::function<void()> wake) {
  std::shared_ptr<RequestExchange> x(new RequestExchange(std::move(request), std::move(wake)));
  x->cancel_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  x->gone_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!x->cancel_ || !x->gone_) return fail(sys_error("eventfd for a request"));
  return x;
}

void RequestExchange::push(Answer a) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(a));
  }
  wake_();
}

void RequestExchange::respond(int status, const Json& document, std::vector<std::pair<std::string, std::string>> headers) {
  {
    std::lock_guard lock(mutex_);
    if (answered_) return;  // a handler answers once; a second answer would be a bug, dropped
    answered_ = true;
  }
  Answer a;
  a.status = status;
  a.body = document.dump(-1, ' ', false, Json::error_handler_t::replace);
  a.headers = std::move(headers);
  push(std::move(a));
}

void RequestExchange::respond_text(int status, std::string body, std::string content_type) {
  {
    std::lock_guard lock(mutex_);
    if (answered_) return;
    answered_ = true;
  }
  Answer a;
  a.status = status;
  a.body = std::move(body);
  a.content_type = std::move(content_type);
  push(std::move(a));
}

void RequestExchange::tunnel(UniqueFd upstream, uint16_t port, std::shared_ptr<void> hold) {
  {
    std::lock_guard lock(mutex_);
    if (answered_) return;
    answered_ = true;
  }
  Answer a;
  a.kind = Answer::Kind::kTunnel;
  a.file = std::move(upstream);
  a.size = port;
  a.hold = std::move(hold);
  push(std::move(a));
}

void RequestExchange::respond_file(UniqueFd file, uint64_t size) {
  {
    std::lock_guard lock(mutex_);
    if (answered_) return;
    answered_ = true;
  }
  Answer a;
  a.kind = Answer::Kind::kFile;
  a.file = std::move(file);
  a.size = size;
  push(std::move(a));
}

bool RequestExchange::push_with_backpressure(Answer a) {
  {
    std::unique_lock lock(mutex_);
    // The producer (a cell's output, a peer's answer) waits for the client, bounded by
    // the client leaving, the server stopping, or the connection's write timeout.
    room_.wait(lock, [&] { return backlog_ < kMaxBacklog || gone_flag_ || stopping_; });
    if (gone_flag_) return false;
    backlog_ += a.body.size();
    queue_.push_back(std::move(a));
  }
  wake_();
  return true;
}

bool RequestExchange::stream_line(const Json& event) {
  {
    std::lock_guard lock(mutex_);
    if (answered_ && !streaming_) return false;
    answered_ = streaming_ = true;
  }
  Answer a;
  a.kind = Answer::Kind::kLine;
  a.body = event.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
  return push_with_backpressure(std::move(a));
}

void RequestExchange::end_stream() {
  {
    std::lock_guard lock(mutex_);
    if (!streaming_) return;
  }
  Answer a;
  a.kind = Answer::Kind::kEnd;
  push(std::move(a));
}

void RequestExchange::relay_head(int status, std::vector<std::pair<std::string, std::string>> headers, std::optional<uint64_t> length) {
  {
    std::lock_guard lock(mutex_);
    if (answered_) return;
    answered_ = relaying_ = true;
  }
  Answer a;
  a.kind = Answer::Kind::kRelayHead;
  a.status = status;
  a.headers = std::move(headers);
  a.length = length;
  push(std::move(a));
}

bool RequestExchange::relay_bytes(std::string_view bytes) {
  {
    std::lock_guard lock(mutex_);
    if (!relaying_ || stopping_) return false;  // stopping: no more backpressure, so no more bytes
  }
  Answer a;
  a.kind = Answer::Kind::kRelayBytes;
  a.body = std::string(bytes);
  return push_with_backpressure(std::move(a));
}

void RequestExchange::relay_end(bool complete) {
  {
    std::lock_guard lock(mutex_);
    if (!relaying_) return;
  }
  Answer a;
  a.kind = Answer::Kind::kRelayEnd;
  a.complete = complete;
  push(std::move(a));
}

std::optional<RequestExchange::Answer> RequestExchange::take() {
  std::lock_guard lock(mutex_);
  if (queue_.empty()) return std::nullopt;
  Answer a = std::move(queue_.front());
  queue_.pop_front();
  return a;
}

void RequestExchange::written(size_t bytes) {
  {
    std::lock_guard lock(mutex_);
    backlog_ -= std::min(backlog_, bytes);
  }
  room_.notify_all();
}

void RequestExchange::client_gone() {
  {
    std::lock_guard lock(mutex_);
    if (gone_flag_) return;
    gone_flag_ = true;
  }
  signal_eventfd(gone_.get());
  room_.notify_all();
}

void RequestExchange::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  signal_eventfd(cancel_.get());
  signal_eventfd(gone_.get());
  room_.notify_all();
}

void RequestExchange::worker_finished() {
  bool unanswered;
  {
    std::lock_guard lock(mutex_);
    unanswered = !answered_;
    // The body's reader is gone: a connection still writing the body gets EPIPE.
    body_read_.reset();
  }
  if (unanswered) respond(500, error_document(make_error(ErrorCode::kInternal, "the request ended without an answer")), {});
  {
    std::lock_guard lock(mutex_);
    worker_done_ = true;
  }
  wake_();
}

bool RequestExchange::finished() const {
  std::lock_guard lock(mutex_);
  return worker_done_ && queue_.empty();
}

bool RequestExchange::began_stream() const {
  std::lock_guard lock(mutex_);
  return streaming_;
}

Result<UniqueFd> RequestExchange::open_body_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return fail(sys_error("pipe2 for a request body"));
  // A bigger pipe: fewer wake-ups of the worker for a large upload.
  (void)::fcntl(fds[1], F_SETPIPE_SZ, 1 << 20);
  body_read_.reset(fds[0]);
  return UniqueFd(fds[1]);
}

void RequestExchange::body_ended(BodyEnd how) {
  std::lock_guard lock(mutex_);
  body_end_ = how;
}

Result<void> RequestExchange::body_complete() {
  std::lock_guard lock(mutex_);
  switch (body_end_) {
    case BodyEnd::kComplete: return {};
    case BodyEnd::kTooLarge:
      return fail(make_error(ErrorCode::kLimitExceeded, "the body is larger than the upload limit of " +
                                                            std::to_string(body_limit >> 20) + " MiB",
                             "raise it with nsbox serve --max-upload"));
    case BodyEnd::kPending:
    case BodyEnd::kBroken: break;
  }
  return fail(make_error(ErrorCode::kMalformedRequest, "the request body ended before its end (the client went away?)"));
}

}  // namespace nsbox::api
