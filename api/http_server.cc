#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it

#include "api/http_server.h"

#include <arpa/inet.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <list>
#include <sstream>
#include <thread>

#include "api/http_errors.h"
#include "api/request_budgets.h"
#include "api/request_exchange.h"
#include "api/request_target.h"
#include "api/worker_pool.h"
#include "isolation/sys/log.h"

namespace nsbox::api {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using net::awaitable;
using net::use_awaitable;
using namespace std::chrono_literals;

constexpr size_t kMaxConnections = 1024;  // per listener
constexpr auto kIdle = 60s;               // a kept-alive connection, for the next request's first byte
constexpr auto kHeadTime = 5s;            // a request head, from its first byte (or the connection's accept)
constexpr auto kBodyStall = 60s;
constexpr auto kWriteStall = 30s;         // a write, or 64 KiB of a file, that the client does not take
constexpr size_t kStallBytes = 64 << 10;
// What the server needs of RLIMIT_NOFILE: both listeners full, and every request in work
// with its eventfds, pipe, file, supervisor socket or peer connection.
constexpr RequestBudgets::Limits kBudgets{};
constexpr rlim_t kFilesWanted = 2 * kMaxConnections + 8 * (kBudgets.probes + kBudgets.open + kBudgets.requests) + 256;
constexpr auto kHeartbeat = 15s;
constexpr auto kStopGrace = 10s;
constexpr auto kTunnelIdle = 10min;  // a port's tunnel with no byte either way
// Threads kept for the next request once theirs is answered (api/worker_pool.h).
constexpr size_t kIdleWorkers = 16;
constexpr auto kIdleWorkerLife = std::chrono::milliseconds(30s);

std::string_view sv(beast::string_view s) { return {s.data(), s.size()}; }

// One listener's connections (the unix socket's, TCP's): each has its own budget, so that
// clients of one cannot crowd out the other's. Those waiting for a request head (new, or
// kept alive between requests) are listed oldest first: a new connection past the limit
// closes the one that has waited longest rather than be refused, so connections that
// never finish a head cannot keep a prompt client out, whichever address it comes from.
struct ConnectionSlots {
  size_t limit = kMaxConnections;  // less when RLIMIT_NOFILE is small (raise_file_limit)
  size_t open = 0;                 // counted connections (one closed to make room no longer is)
  std::list<std::function<void()>> waiting;  // each closes its connection and uncounts it

  bool close_oldest_waiting() {
    if (waiting.empty()) return false;
    auto close = std::move(waiting.front());
    waiting.pop_front();
    close();
    return true;
  }
};

// What every connection shares: the server's state, on the I/O thread only (but
// `in_work` and the budgets, which workers give back).
struct Shared {
  Shared(ApiService& s, net::io_context& io) : service(s), ioc(io) {}
  ApiService& service;
  net::io_context& ioc;
  size_t connections = 0;  // every connection's coroutine, for the stop
  ConnectionSlots unix_slots, tcp_slots;
  RequestBudgets budgets;
  std::atomic<size_t> in_work = 0;                    // workers running (the exit waits for them)
  WorkerPool workers{kIdleWorkers, kIdleWorkerLife};  // the requests' handlers run on its threads
  bool stopping = false;
  std::list<std::function<void()>> in_flight;  // requests being answered: cancelled after the grace
  std::function<void()> on_quiet;              // a connection ended while stopping
};

Result<HttpRequest> to_request(const http::request_header<>& h) {
  HttpRequest r;
  r.method = std::string(sv(h.method_string()));
  NSBOX_CHECK(parse_target(sv(h.target()), r));
  if (auto it = h.find(http::field::authorization); it != h.end()) r.authorization = std::string(sv(it->value()));
  if (auto it = h.find(http::field::accept); it != h.end()) r.accept = std::string(sv(it->value()));
  if (auto it = h.find("X-Nsbox-Forwarded-By"); it != h.end()) r.forwarded_by = std::string(sv(it->value()));
  if (auto it = h.find(http::field::host); it != h.end()) r.host = std::string(sv(it->value()));
  for (const auto& field : h) r.headers.emplace_back(std::string(sv(field.name_string())), std::string(sv(field.value())));
  r.target = std::string(sv(h.target()));
  return r;
}

http::response<http::string_body> json_response(int status, const std::string& body, unsigned version, bool keep_alive,
                                                const std::vector<std::pair<std::string, std::string>>& headers = {},
                                                const std::string& content_type = "") {
  http::response<http::string_body> res{static_cast<http::status>(status), version};
  res.set(http::field::content_type, content_type.empty() ? "application/json" : content_type);
  res.set(http::field::cache_control, "no-store");
  for (const auto& [k, v] : headers) res.set(k, v);
  res.body() = content_type.empty() ? body + "\n" : body;
  res.keep_alive(keep_alive);
  res.prepare_payload();
  return res;
}

std::string error_body(const Error& e) { return error_document(e).dump(-1, ' ', false, Json::error_handler_t::replace); }

// Everything that happens on one connection.
template <class Stream>
class Connection {
 public:
  Connection(Shared& shared, ConnectionSlots& slots, Stream stream) : shared_(shared), slots_(slots), stream_(std::move(stream)) {}

  awaitable<void> serve() {
    ++shared_.connections;
    if (slots_.open >= slots_.limit) slots_.close_oldest_waiting();
    if (slots_.open >= slots_.limit) {
      // Every connection of this listener is in a request (a token's, or one of the
      // budget of those without): none is closed for a newcomer.
      co_await write_error(make_error(ErrorCode::kUnavailable, "the server has too many connections", "try again"), 11, false);
    } else {
      ++slots_.open;
      counted_ = true;
      for (bool keep = true; keep && !shared_.stopping && counted_;) keep = co_await one_request();
      if (counted_) --slots_.open;
    }
    beast::error_code ignored;
    beast::get_lowest_layer(stream_).socket().shutdown(net::socket_base::shutdown_send, ignored);
    --shared_.connections;
    if (shared_.stopping && shared_.on_quiet) shared_.on_quiet();
  }

 private:
  // Listed while waiting for a request head: a newer connection (or the stop) may close
  // this one meanwhile; its slot is given back at once.
  void begin_waiting() {
    waiting_ = slots_.waiting.insert(slots_.waiting.end(), [this] {
      listed_ = false;
      counted_ = false;
      --slots_.open;
      beast::get_lowest_layer(stream_).close();
    });
    listed_ = true;
  }
  void end_waiting() {
    if (listed_) slots_.waiting.erase(waiting_);
    listed_ = false;
  }

  // The next request's head: a new connection has kHeadTime from its accept; a kept-alive
  // one waits up to kIdle for a first byte, then has kHeadTime for the rest.
  awaitable<beast::error_code> read_head(http::request_parser<http::empty_body>& head) {
    beast::error_code ec;
    begin_waiting();
    if (requests_++ > 0 && buffer_.size() == 0) {
      stream_.expires_after(kIdle);
      size_t n = co_await stream_.async_read_some(buffer_.prepare(1024), net::redirect_error(use_awaitable, ec));
      buffer_.commit(n);
    }
    if (!ec) {
      stream_.expires_after(kHeadTime);
      co_await http::async_read_header(stream_, buffer_, head, net::redirect_error(use_awaitable, ec));
    }
    end_waiting();
    co_return ec;
  }

  // One request and its answer; false when the connection must close.
  awaitable<bool> one_request() {
    http::request_parser<http::empty_body> head;
    head.header_limit(16 << 10);
    // Not boost::none: Beast 1.74 compares a Content-Length with an empty optional and
    // refuses every body. Each endpoint sets its own limit below.
    head.body_limit(std::numeric_limits<std::uint64_t>::max());
    beast::error_code ec = co_await read_head(head);
    if (!counted_) co_return false;  // closed for a newer connection, or by the stop
    if (ec == http::error::header_limit) {
      co_await write_error(make_error(ErrorCode::kLimitExceeded, "the request's header is larger than 16 KiB"), 11, false, 431);
      co_return false;
    }
    if (ec) {
      if (ec != http::error::end_of_stream && ec != net::error::eof && ec != beast::error::timeout &&
          ec != net::error::operation_aborted && ec != net::error::connection_reset)
        co_await write_error(make_error(ErrorCode::kMalformedRequest, "not an HTTP/1.1 request: " + ec.message()), 11, false);
      co_return false;
    }
    const auto& h = head.get();
    unsigned version = h.version();
    bool keep = h.keep_alive();
    auto request = to_request(h);
    if (!request) {
      co_await write_error(request.error(), version, false);
      co_return false;
    }
    request->content_length = head.content_length() ? std::optional<uint64_t>(*head.content_length()) : std::nullopt;
    if (shared_.stopping) {
      co_await write_error(make_error(ErrorCode::kUnavailable, "the server is stopping"), version, false);
      co_return false;
    }
    const ApiService::Intake intake = shared_.service.intake(*request);
    if (!intake.admitted) {
      // A named vector: GCC 12 rejects an initializer list inside this co_await under ASan
      // ("array used as initializer").
      const std::vector<std::pair<std::string, std::string>> challenge = {{"WWW-Authenticate", "Bearer"}};
      co_await write_error(unauthorized_error(), version, false, 0, challenge);
      co_return false;  // its body, if any, is never read
    }
    // A client that asks first (curl does for bodies past 1 MiB) is told to go on, once
    // the limits and the token allow it, rather than waiting out its own timer.
    bool continue_first = beast::iequals(h[http::field::expect], "100-continue");
    const bool upload = intake.upload;
    uint64_t limit = upload ? shared_.service.max_upload_bytes() : kMaxJsonBody;
    if (request->content_length && *request->content_length > limit) {
      co_await write_error(make_error(ErrorCode::kLimitExceeded, "the body of " + std::to_string(*request->content_length) +
                                                                     " bytes is larger than the limit of " + std::to_string(limit >> 20) + " MiB"),
                           version, false);
      co_return false;
    }
    // Its budget before its body: a request refused reads nothing more.
    auto ticket = shared_.budgets.take(intake.budget, intake.budget_key);
    if (!ticket) {
      const std::vector<std::pair<std::string, std::string>> retry = {{"Retry-After", "1"}};
      co_await write_error(ticket.error(), version, false, 0, retry);
      co_return false;
    }
    if (continue_first) {
      http::response<http::empty_body> go_on{http::status::continue_, version};
      stream_.expires_after(kWriteStall);
      co_await http::async_write(stream_, go_on, net::redirect_error(use_awaitable, ec));
      if (ec) co_return false;
    }
    // A port's tunnel reads no body here: its bytes, as they come, are the sandbox's.
    if (intake.tunnel) co_return co_await answer(std::move(*request), version, false, nullptr, std::move(*ticket));
    if (!upload) {
      http::request_parser<http::string_body> whole{std::move(head)};
      whole.body_limit(kMaxJsonBody);
      stream_.expires_after(kBodyStall);
      co_await http::async_read(stream_, buffer_, whole, net::redirect_error(use_awaitable, ec));
      if (ec) {
        if (ec == http::error::body_limit)
          co_await write_error(make_error(ErrorCode::kLimitExceeded, "the body is larger than 16 MiB"), version, false);
        co_return false;
      }
      request->body = std::move(whole.get().body());
      co_return co_await answer(std::move(*request), version, keep, nullptr, std::move(*ticket));
    }
    co_return co_await answer(std::move(*request), version, keep, &head, std::move(*ticket));
  }

  // Runs the request on a worker and writes what it answers. The worker holds the
  // ticket's slot while it runs; the connection too, until the answer is written, when
  // the ticket says so (requests without a token: a client that does not read holds its
  // slot, never a slot of another kind).
  awaitable<bool> answer(HttpRequest request, unsigned version, bool keep, http::request_parser<http::empty_body>* upload,
                         RequestBudgets::Ticket ticket) {
    std::shared_ptr<void> held_while_written = ticket.until_written ? ticket.slot : nullptr;
    auto exec = stream_.get_executor();
    auto wake_timer = std::make_shared<net::steady_timer>(exec);
    wake_ = wake_timer;
    auto signalled = std::make_shared<bool>(false);
    auto made = RequestExchange::make(std::move(request), [exec, wake_timer, signalled] {
      net::post(exec, [wake_timer, signalled] {
        *signalled = true;
        wake_timer->cancel();
      });
    });
    if (!made) {
      co_await write_error(made.error(), version, false);
      co_return false;
    }
    std::shared_ptr<RequestExchange> x = std::move(*made);
    x->body_limit = shared_.service.max_upload_bytes();
    UniqueFd body_sink;
    if (upload) {
      auto sink = x->open_body_pipe();
      if (!sink) {
        co_await write_error(sink.error(), version, false);
        co_return false;
      }
      body_sink = std::move(*sink);
    }
    ++shared_.in_work;
    std::string no_thread;
    try {
      shared_.workers.run([x, &shared = shared_, slot = std::move(ticket.slot)]() mutable {
        shared.service.handle(*x);
        x->worker_finished();
        slot.reset();
        --shared.in_work;
      });
    } catch (const std::system_error& e) {  // no thread to be had (EAGAIN): not a crash of the I/O thread
      --shared_.in_work;
      no_thread = e.what();
    }
    if (!no_thread.empty()) {
      co_await write_error(make_error(ErrorCode::kUnavailable, "the server cannot start a thread: " + no_thread, "try again"), version, false);
      co_return false;
    }
    auto stop_hook = shared_.in_flight.insert(shared_.in_flight.end(), [x] { x->stop(); });

    bool body_read = true;
    if (upload) body_read = co_await pump_body(*upload, std::move(body_sink), *x);
    // While the worker works, a read on the connection tells if the client leaves.
    auto watch = std::make_shared<Watch>(exec);
    if (body_read) net::co_spawn(exec, watch_client(watch, x), net::detached);
    else watch->running = false;  // nothing watches (the connection closes after the answer)
    bool ok = co_await write_answer(*x, version, keep && body_read, *watch, wake_timer, signalled);
    co_await stop_watching(watch);
    shared_.in_flight.erase(stop_hook);
    if (tunnel_) {
      auto tunnel = std::move(*tunnel_);
      tunnel_.reset();
      if (!watch->gone) co_await pump_tunnel(std::move(tunnel));
      co_return false;
    }
    // The worker may still run (a cell whose client left): it finishes on its own, and
    // the exchange, shared, goes with it.
    co_return ok && keep && body_read && !watch->gone;
  }

  // An upload's body, into the pipe the worker reads (the pipe's room is the backpressure).
  awaitable<bool> pump_body(http::request_parser<http::empty_body>& head, UniqueFd sink, RequestExchange& x) {
    http::request_parser<http::buffer_body> body{std::move(head)};
    body.body_limit(shared_.service.max_upload_bytes() + 1);  // one more byte makes the upload refuse itself
    net::posix::stream_descriptor pipe(stream_.get_executor(), sink.release());
    auto chunk = std::make_unique<char[]>(1 << 16);
    buffer_.reserve(1 << 16);  // reads are as large as the buffer's room (512 bytes otherwise)
    beast::error_code ec;
    RequestExchange::BodyEnd end = RequestExchange::BodyEnd::kComplete;
    while (!body.is_done()) {
      body.get().body().data = chunk.get();
      body.get().body().size = 1 << 16;
      stream_.expires_after(kBodyStall);
      co_await http::async_read(stream_, buffer_, body, net::redirect_error(use_awaitable, ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) {
        end = ec == http::error::body_limit ? RequestExchange::BodyEnd::kTooLarge : RequestExchange::BodyEnd::kBroken;
        break;
      }
      size_t n = (1 << 16) - body.get().body().size;
      if (n == 0) continue;
      co_await net::async_write(pipe, net::buffer(chunk.get(), n), net::redirect_error(use_awaitable, ec));
      if (ec) {  // the worker stopped reading (it answered already)
        end = RequestExchange::BodyEnd::kBroken;
        break;
      }
    }
    stream_.expires_never();
    buffer_.shrink_to_fit();
    // Said before the pipe closes: the worker asks at EOF.
    x.body_ended(end);
    beast::error_code ignored;
    pipe.close(ignored);
    co_return end == RequestExchange::BodyEnd::kComplete;
  }

  struct Watch {
    explicit Watch(net::any_io_executor ex) : done(ex) {}
    net::steady_timer done;
    bool running = true, gone = false;
  };

  // A read while the answer is prepared: EOF or an error means the client left. A byte
  // that arrives (a pipelined request) stays in the buffer for the next request.
  awaitable<void> watch_client(std::shared_ptr<Watch> w, std::shared_ptr<RequestExchange> x) {
    beast::error_code ec;
    auto room = buffer_.prepare(1);
    size_t n = co_await beast::get_lowest_layer(stream_).socket().async_read_some(room, net::redirect_error(use_awaitable, ec));
    buffer_.commit(n);
    if (ec && ec != net::error::operation_aborted) {
      w->gone = true;
      x->client_gone();
    }
    w->running = false;
    w->done.cancel();
    wake_->cancel();  // a writer waiting for the worker learns the client is gone
  }

  awaitable<void> stop_watching(std::shared_ptr<Watch> w) {
    if (!w->running) co_return;
    beast::error_code ec;
    beast::get_lowest_layer(stream_).socket().cancel(ec);
    while (w->running) {
      w->done.expires_after(1s);
      co_await w->done.async_wait(net::redirect_error(use_awaitable, ec));
    }
  }

  awaitable<bool> write_answer(RequestExchange& x, unsigned version, bool keep, const Watch& watch,
                               std::shared_ptr<net::steady_timer> wake, std::shared_ptr<bool> signalled) {
    beast::error_code ec;
    bool streaming = false, relaying = false, relay_chunked = false;
    for (;;) {
      auto part = x.take();
      // A client that left gets nothing more; the worker goes on alone.
      if (watch.gone) co_return false;
      if (!part) {
        if (x.finished()) co_return !streaming && !relaying;  // a stream without its end: close
        if (!*signalled) {
          wake->expires_after(kHeartbeat);
          co_await wake->async_wait(net::redirect_error(use_awaitable, ec));
          // A relayed stream has its owner's heartbeats (ours could split its lines).
          if (!ec && !*signalled && streaming) {
            std::string beat = "{\"type\":\"heartbeat\"}\n";
            if (!co_await write_chunk(beat)) {
              // As for a line: the producer must not wait for room nobody will make.
              x.client_gone();
              co_return false;
            }
          }
        }
        *signalled = false;
        continue;
      }
      using Kind = RequestExchange::Answer::Kind;
      if (part->kind == Kind::kTunnel) {  // pumped by answer(), once nothing watches the client
        tunnel_ = std::move(*part);
        co_return false;
      }
      if (part->kind == Kind::kDocument) {
        auto res = json_response(part->status, part->body, version, keep && !shared_.stopping, part->headers, part->content_type);
        stream_.expires_after(kWriteStall);
        co_await http::async_write(stream_, res, net::redirect_error(use_awaitable, ec));
        stream_.expires_never();
        co_return !ec && res.keep_alive();
      }
      if (part->kind == Kind::kFile) {
        http::response<http::file_body> res{http::status::ok, version};
        beast::file_posix file;
        file.native_handle(part->file.release());  // the body owns it now
        res.body().reset(std::move(file), ec);
        res.set(http::field::content_type, "application/octet-stream");
        res.set(http::field::cache_control, "no-store");
        res.keep_alive(keep && !shared_.stopping);
        res.content_length(part->size);
        http::response_serializer<http::file_body> sr{res};
        // The client must take 64 KiB per 30 s: one that reads a byte now and then cannot
        // hold the connection (and a link's slot) for as long as it likes.
        size_t since_deadline = kStallBytes;
        while (!ec && !sr.is_done()) {
          if (since_deadline >= kStallBytes) {
            stream_.expires_after(kWriteStall);
            since_deadline = 0;
          }
          since_deadline += co_await http::async_write_some(stream_, sr, net::redirect_error(use_awaitable, ec));
        }
        stream_.expires_never();
        co_return !ec && res.keep_alive();
      }
      if (part->kind == Kind::kRelayHead) {
        http::response<http::empty_body> res{static_cast<http::status>(part->status), version};
        for (const auto& [k, v] : part->headers) res.set(k, v);
        res.keep_alive(keep && !shared_.stopping);
        if (part->length) res.content_length(*part->length);
        else res.chunked(true);
        if (!co_await write_head(res, x)) co_return false;
        relaying = true;
        relay_chunked = !part->length;
        keep = res.keep_alive();
        continue;
      }
      if (part->kind == Kind::kRelayBytes) {
        size_t n = part->body.size();
        bool ok = relay_chunked ? co_await write_chunk(part->body) : co_await write_raw(part->body);
        x.written(n);
        if (!ok) {
          x.client_gone();
          co_return false;
        }
        continue;
      }
      if (part->kind == Kind::kRelayEnd) {
        if (!part->complete) co_return false;  // the peer's answer broke off: so does ours
        if (relay_chunked) {
          stream_.expires_after(kWriteStall);
          co_await net::async_write(stream_, http::make_chunk_last(), net::redirect_error(use_awaitable, ec));
          stream_.expires_never();
        }
        co_return !ec && keep;
      }
      if (!streaming) {
        http::response<http::empty_body> res{http::status::ok, version};
        res.set(http::field::content_type, "application/x-ndjson");
        res.set(http::field::cache_control, "no-store");
        res.keep_alive(keep && !shared_.stopping);
        res.chunked(true);
        if (!co_await write_head(res, x)) co_return false;
        streaming = true;
        keep = res.keep_alive();
      }
      if (part->kind == Kind::kLine) {
        size_t n = part->body.size();
        bool ok = co_await write_chunk(part->body);
        x.written(n);
        if (!ok) {
          x.client_gone();
          co_return false;
        }
        continue;
      }
      stream_.expires_after(kWriteStall);  // kEnd
      co_await net::async_write(stream_, http::make_chunk_last(), net::redirect_error(use_awaitable, ec));
      stream_.expires_never();
      co_return !ec && keep;
    }
  }

  // A port's tunnel: the bytes read past the request's head first, then bytes both ways
  // until both sides have ended, each end passed on as a half-close; kTunnelIdle without
  // a byte either way ends it, as does the server's stop.
  awaitable<void> pump_tunnel(RequestExchange::Answer tunnel) {
    auto exec = stream_.get_executor();
    auto up = std::make_shared<net::posix::stream_descriptor>(exec, tunnel.file.release());
    auto& client = beast::get_lowest_layer(stream_).socket();
    beast::get_lowest_layer(stream_).expires_never();
    beast::error_code ec;
    if (buffer_.size()) {
      co_await net::async_write(*up, buffer_.data(), net::redirect_error(use_awaitable, ec));
      buffer_.consume(buffer_.size());
      if (ec) co_return;
    }
    struct State {
      explicit State(net::any_io_executor ex) : timer(ex) {}
      net::steady_timer timer;
      int running = 2;
      std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();
    };
    auto state = std::make_shared<State>(exec);
    // `silent`: what `to` gets when `from` ends without a byte (the sandbox's port closed
    // without answering: nothing listens there, or it refused).
    auto copy = [state](auto& from, auto& to, auto end_to, std::string silent) -> awaitable<void> {
      std::vector<char> buf(1 << 16);
      beast::error_code e;
      bool any = false;
      for (;;) {
        size_t n = co_await from.async_read_some(net::buffer(buf), net::redirect_error(use_awaitable, e));
        if (e) break;
        any = true;
        state->last = std::chrono::steady_clock::now();
        co_await net::async_write(to, net::buffer(buf.data(), n), net::redirect_error(use_awaitable, e));
        if (e) break;
      }
      if (!any && !silent.empty()) co_await net::async_write(to, net::buffer(silent), net::redirect_error(use_awaitable, e));
      end_to();
      if (--state->running == 0) state->timer.cancel();
    };
    auto refused = json_response(502, error_body(make_error(ErrorCode::kRemote, "port " + std::to_string(tunnel.size) +
                                                           " of the sandbox closed the connection without answering",
                                                           "is a server listening on the sandbox's 127.0.0.1:" + std::to_string(tunnel.size) + "?")),
                                 11, false);
    std::ostringstream silent;
    silent << refused;
    net::co_spawn(exec, copy(client, *up, [up] { ::shutdown(up->native_handle(), SHUT_WR); }, std::string()), net::detached);
    net::co_spawn(exec, copy(*up, client, [&client] {
      beast::error_code ignored;
      client.shutdown(net::socket_base::shutdown_send, ignored);
    }, silent.str()), net::detached);
    auto stop_hook = shared_.in_flight.insert(shared_.in_flight.end(), [state] { state->last = {}; state->timer.cancel(); });
    while (state->running > 0) {
      state->timer.expires_after(std::min<std::chrono::steady_clock::duration>(kTunnelIdle, 30s));
      co_await state->timer.async_wait(net::redirect_error(use_awaitable, ec));
      if (state->running > 0 && (shared_.stopping || std::chrono::steady_clock::now() - state->last >= kTunnelIdle)) {
        beast::error_code ignored;
        client.cancel(ignored);
        up->cancel(ignored);
        ::shutdown(up->native_handle(), SHUT_RDWR);
        client.shutdown(net::socket_base::shutdown_both, ignored);
      }
    }
    shared_.in_flight.erase(stop_hook);
  }

  awaitable<bool> write_chunk(const std::string& bytes) {
    beast::error_code ec;
    stream_.expires_after(kWriteStall);  // a client that stops reading is dropped
    co_await net::async_write(stream_, http::make_chunk(net::buffer(bytes)), net::redirect_error(use_awaitable, ec));
    stream_.expires_never();
    co_return !ec;
  }

  // A streamed answer's header; false (and the client taken as gone) when it fails.
  awaitable<bool> write_head(http::response<http::empty_body>& res, RequestExchange& x) {
    beast::error_code ec;
    http::response_serializer<http::empty_body> sr{res};
    stream_.expires_after(kWriteStall);
    co_await http::async_write_header(stream_, sr, net::redirect_error(use_awaitable, ec));
    stream_.expires_never();
    if (ec) x.client_gone();
    co_return !ec;
  }

  awaitable<bool> write_raw(const std::string& bytes) {
    beast::error_code ec;
    stream_.expires_after(kWriteStall);
    co_await net::async_write(stream_, net::buffer(bytes), net::redirect_error(use_awaitable, ec));
    stream_.expires_never();
    co_return !ec;
  }

  awaitable<void> write_error(const Error& e, unsigned version, bool keep, int status = 0,
                              const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    auto res = json_response(status ? status : http_status(e.code), error_body(e), version, keep, headers);
    beast::error_code ec;
    stream_.expires_after(kWriteStall);
    co_await http::async_write(stream_, res, net::redirect_error(use_awaitable, ec));
  }

  Shared& shared_;
  ConnectionSlots& slots_;
  Stream stream_;
  std::optional<RequestExchange::Answer> tunnel_;  // a port's tunnel, to pump once answered
  beast::flat_buffer buffer_;
  std::shared_ptr<net::steady_timer> wake_;  // the current request's
  size_t requests_ = 0;
  bool counted_ = false;  // in slots_.open; false once closed to make room (or by the stop)
  bool listed_ = false;   // in slots_.waiting, at waiting_
  std::list<std::function<void()>>::iterator waiting_;
};

template <class Acceptor, class Protocol>
awaitable<void> accept_loop(Shared& shared, Acceptor& acceptor, ConnectionSlots& slots, ConnectionSlots& other) {
  for (;;) {
    beast::error_code ec;
    auto socket = co_await acceptor.async_accept(net::redirect_error(use_awaitable, ec));
    if (ec == net::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec == net::error::no_descriptors || ec.value() == ENFILE) {
      // Out of file descriptors: a connection still waiting for its head gives its own
      // up (this listener's first); wait a little only when none does.
      if (slots.close_oldest_waiting() || other.close_oldest_waiting()) continue;
    }
    if (ec) {
      net::steady_timer pause(acceptor.get_executor(), 100ms);  // rather than spin
      co_await pause.async_wait(net::redirect_error(use_awaitable, ec));
      continue;
    }
    auto conn = std::make_shared<Connection<beast::basic_stream<Protocol>>>(shared, slots, beast::basic_stream<Protocol>(std::move(socket)));
    net::co_spawn(acceptor.get_executor(), [conn]() -> awaitable<void> { co_await conn->serve(); }, net::detached);
  }
}

class BeastServer final : public HttpServer {
 public:
  BeastServer(ApiService& service, size_t connections_per_listener) : shared_(service, ioc_), signals_(ioc_, SIGTERM, SIGINT) {
    shared_.unix_slots.limit = shared_.tcp_slots.limit = connections_per_listener;
  }

  Result<void> bind_all(const ListenOptions& o) {
    try {
      if (!o.socket_path.empty()) {
        ::unlink(o.socket_path.c_str());
        // Made 0600 by the umask at bind: no moment when others could connect.
        mode_t old = ::umask(0177);
        unix_.emplace(ioc_, net::local::stream_protocol::endpoint(o.socket_path));
        ::umask(old);
        unix_->listen(net::socket_base::max_listen_connections);
        socket_path_ = o.socket_path;
      }
      if (!o.tcp_host.empty()) {
        auto address = net::ip::make_address(o.tcp_host == "localhost" ? "127.0.0.1" : o.tcp_host);
        tcp_.emplace(ioc_);
        net::ip::tcp::endpoint endpoint(address, o.tcp_port);
        tcp_->open(endpoint.protocol());
        tcp_->set_option(net::socket_base::reuse_address(true));
        tcp_->bind(endpoint);
        tcp_->listen(net::socket_base::max_listen_connections);
        port_ = tcp_->local_endpoint().port();
      }
    } catch (const boost::system::system_error& e) {
      return fail(sys_error("listen on " + (o.tcp_host.empty() ? o.socket_path : o.tcp_host + ":" + std::to_string(o.tcp_port)),
                            e.code().value()));
    }
    return {};
  }

  uint16_t tcp_port() const override { return port_; }

  Result<void> run() override {
    if (unix_)
      net::co_spawn(ioc_, accept_loop<net::local::stream_protocol::acceptor, net::local::stream_protocol>(shared_, *unix_, shared_.unix_slots, shared_.tcp_slots),
                    net::detached);
    if (tcp_)
      net::co_spawn(ioc_, accept_loop<net::ip::tcp::acceptor, net::ip::tcp>(shared_, *tcp_, shared_.tcp_slots, shared_.unix_slots), net::detached);
    wait_for_signal();
    shared_.on_quiet = [this] {
      if (shared_.connections == 0) finish();
    };
    ioc_.run();
    // Workers whose waits were cancelled return at once; a create in progress may take a
    // few seconds more. Bounded: then the process ends and takes them with it.
    for (int i = 0; i < 150 && shared_.in_work > 0; ++i) std::this_thread::sleep_for(100ms);
    return {};
  }

 private:
  void stop() override {
    net::post(ioc_, [this] { begin_stop(); });
  }

  void wait_for_signal() {
    signals_.async_wait([this](beast::error_code ec, int) {
      if (ec) return;
      if (shared_.stopping) return cancel_all();  // a second signal: no grace
      // A sharded server drains first (ApiService::on_stop_signal); the drain stops us.
      if (shared_.service.on_stop_signal()) return wait_for_signal();
      begin_stop();
      if (shared_.connections > 0) wait_for_signal();  // a second one: no grace
    });
  }

  // The first signal's stop (or stop()'s): listeners close, idle connections close,
  // requests in flight get the grace.
  void begin_stop() {
    if (shared_.stopping) return;
    shared_.stopping = true;
    shared_.service.set_stopping();
    log::info("stopping: no new connections; requests in flight have 10 s");
    beast::error_code ignored;
    if (unix_) unix_->close(ignored);
    if (tcp_) tcp_->close(ignored);
    if (!socket_path_.empty()) ::unlink(socket_path_.c_str());
    grace_.emplace(ioc_, kStopGrace);
    grace_->async_wait([this](beast::error_code e) {
      if (!e) cancel_all();
    });
    close_waiting();
    if (shared_.connections == 0) finish();
  }

  void cancel_all() {
    for (auto& hook : std::list<std::function<void()>>(shared_.in_flight)) hook();
    close_waiting();
  }

  void close_waiting() {
    while (shared_.unix_slots.close_oldest_waiting()) {
    }
    while (shared_.tcp_slots.close_oldest_waiting()) {
    }
  }

  // Nothing is left to serve: let run() return.
  void finish() {
    beast::error_code ignored;
    signals_.cancel(ignored);
    if (grace_) grace_->cancel();
  }

  net::io_context ioc_{1};
  Shared shared_;
  net::signal_set signals_;
  std::optional<net::local::stream_protocol::acceptor> unix_;
  std::optional<net::ip::tcp::acceptor> tcp_;
  std::optional<net::steady_timer> grace_;
  std::string socket_path_;
  uint16_t port_ = 0;
};

bool is_loopback(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr a{};
  return ::inet_pton(AF_INET, host.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

// A shell's usual soft limit (1,024) is less than one listener's connections: raise it
// (toward the hard limit) to what the server may need. Returns how many connections each
// listener may then hold: at most a quarter of the descriptors, so that half stay for the
// requests in work (each needs a few). Past the limit anyway, accept closes the
// connection that has waited longest for a head (accept_loop).
size_t raise_file_limit() {
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) != 0) return kMaxConnections;
  if (files.rlim_cur < kFilesWanted) {
    files.rlim_cur = files.rlim_max == RLIM_INFINITY ? kFilesWanted : std::min(files.rlim_max, kFilesWanted);
    if (::setrlimit(RLIMIT_NOFILE, &files) != 0) (void)::getrlimit(RLIMIT_NOFILE, &files);
  }
  if (files.rlim_cur >= kFilesWanted) return kMaxConnections;
  const size_t per_listener = std::min<size_t>(kMaxConnections, std::max<size_t>(16, files.rlim_cur / 4));
  log::warn("RLIMIT_NOFILE lets the server open " + std::to_string(files.rlim_cur) + " files, fewer than the " +
            std::to_string(kFilesWanted) + " it may need: each listener takes " + std::to_string(per_listener) +
            " connections (raise the hard limit)");
  return per_listener;
}

}  // namespace

Result<std::unique_ptr<HttpServer>> HttpServer::bind(ApiService& service, const ListenOptions& options) {
  ::signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error code, not a signal
  auto server = std::make_unique<BeastServer>(service, raise_file_limit());
  NSBOX_CHECK(server->bind_all(options));
  return std::unique_ptr<HttpServer>(std::move(server));
}

Result<ListenOptions> parse_listen(const std::string& text, bool allow_remote) {
  ListenOptions o;
  std::string host, port;
  if (text.starts_with("[")) {
    auto close = text.find("]:");
    if (close == std::string::npos) return fail(make_error(ErrorCode::kInvalidArgument, "--listen '" + text + "': write [ADDRESS]:PORT"));
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string::npos) return fail(make_error(ErrorCode::kInvalidArgument, "--listen '" + text + "': write ADDRESS:PORT"));
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  char* end = nullptr;
  unsigned long p = std::strtoul(port.c_str(), &end, 10);
  if (port.empty() || *end || p > 65535) return fail(make_error(ErrorCode::kInvalidArgument, "--listen '" + text + "': bad port"));
  beast::error_code ec;
  if (host != "localhost") net::ip::make_address(host, ec);
  if (ec) return fail(make_error(ErrorCode::kInvalidArgument, "--listen '" + text + "': a numeric address or localhost"));
  if (!allow_remote && !is_loopback(host))
    return fail(make_error(ErrorCode::kInvalidArgument, "--listen " + text + " is not a loopback address",
                           "add --allow-remote to serve other machines (put a TLS proxy in front: the API has no TLS)"));
  o.tcp_host = host;
  o.tcp_port = static_cast<uint16_t>(p);
  o.allow_remote = allow_remote;
  return o;
}

}  // namespace nsbox::api
