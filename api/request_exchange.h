// The bridge between the worker that answers a request (api/api_service.h) and the
// connection that writes the answer (api/http_server.cc). Thread-safe; no HTTP here.
//
// The worker's answer parts wait in a queue for the connection: one document, one file,
// or stream lines; a stream's producer blocks while more than kMaxBacklog bytes wait, and
// is let go when the client leaves or the server stops. Eventfds tell CallControl waits
// to give up: cancel_fd when the server stops, gone_fd also when the client leaves.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "api/exchange.h"

namespace nsbox::api {

class RequestExchange final : public Exchange {
 public:
  static constexpr size_t kMaxBacklog = 1u << 20;

  struct Answer {
    enum class Kind { kDocument, kFile, kLine, kEnd, kRelayHead, kRelayBytes, kRelayEnd, kTunnel };
    Kind kind = Kind::kDocument;
    int status = 200;
    std::string body;  // the document, or a line (with its newline)
    std::vector<std::pair<std::string, std::string>> headers;
    UniqueFd file;
    uint64_t size = 0;
    std::string content_type;        // kDocument: "" for JSON
    std::optional<uint64_t> length;  // kRelayHead: the body's length; none: chunked
    bool complete = true;            // kRelayEnd
    std::shared_ptr<void> hold;      // kTunnel: kept while it runs (`file` is its upstream, `size` the port)
  };
  enum class BodyEnd { kPending, kComplete, kTooLarge, kBroken };

  // `wake` is called (from any thread) when there is something for the connection.
  static Result<std::shared_ptr<RequestExchange>> make(HttpRequest request, std::function<void()> wake);

  // Exchange: the worker's side.
  const HttpRequest& request() const override { return request_; }
  int body_fd() override { return body_read_.get(); }
  Result<void> body_complete() override;
  void respond(int status, const Json& document, std::vector<std::pair<std::string, std::string>> headers) override;
  void respond_file(UniqueFd file, uint64_t size) override;
  void respond_text(int status, std::string body, std::string content_type) override;
  bool stream_line(const Json& event) override;
  void end_stream() override;
  void relay_head(int status, std::vector<std::pair<std::string, std::string>> headers, std::optional<uint64_t> length) override;
  bool relay_bytes(std::string_view bytes) override;
  void relay_end(bool complete) override;
  void tunnel(UniqueFd upstream, uint16_t port, std::shared_ptr<void> hold) override;
  int cancel_fd() const override { return cancel_.get(); }
  int gone_fd() const override { return gone_.get(); }

  // The connection's side.
  std::optional<Answer> take();  // the next part to write, if any
  void written(size_t bytes);    // a line went out: room for the producer
  void client_gone();
  void stop();                   // the server stops: waits are cancelled
  void worker_finished();        // whatever the worker did, it is done
  bool finished() const;         // the worker is done and every part was taken
  bool began_stream() const;
  // For an upload: a pipe whose read end is body_fd(); the connection writes the body
  // into the returned write end and says how it ended.
  Result<UniqueFd> open_body_pipe();
  void body_ended(BodyEnd how);
  uint64_t body_limit = 0;  // for body_complete's message

 private:
  RequestExchange(HttpRequest request, std::function<void()> wake) : request_(std::move(request)), wake_(std::move(wake)) {}
  void push(Answer a);
  // A stream's part (a line, relayed bytes) once the client has room for it.
  bool push_with_backpressure(Answer a);

  HttpRequest request_;
  std::function<void()> wake_;
  mutable std::mutex mutex_;
  std::condition_variable room_;
  std::deque<Answer> queue_;
  size_t backlog_ = 0;
  bool answered_ = false, streaming_ = false, relaying_ = false, gone_flag_ = false, stopping_ = false, worker_done_ = false;
  BodyEnd body_end_ = BodyEnd::kPending;
  UniqueFd cancel_, gone_;
  UniqueFd body_read_;
};

}  // namespace nsbox::api
