// A scripted HTTP server on 127.0.0.1 for tests of what nsbox's HTTP client sends and does
// with odd answers: every connection gets its request head recorded and `reply` written
// back; then the connection is closed, or (hold) kept open and silent until the client
// closes it or 20 s pass.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace nsbox::test {

class LoopbackHttpServer {
 public:
  explicit LoopbackHttpServer(std::string reply, bool hold = false);
  ~LoopbackHttpServer();
  LoopbackHttpServer(const LoopbackHttpServer&) = delete;
  LoopbackHttpServer& operator=(const LoopbackHttpServer&) = delete;

  int port() const { return port_; }
  std::string url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port_) + path; }
  std::vector<std::string> requests() const;  // the heads received so far, in order
  int connections() const { return connections_; }
  bool client_closed() const { return client_closed_; }  // a held connection was closed by the client

 private:
  void serve();
  std::string reply_;
  bool hold_;
  int fd_ = -1;
  int port_ = 0;
  mutable std::mutex mutex_;
  std::vector<std::string> requests_;
  std::atomic<int> connections_ = 0;
  std::atomic<bool> client_closed_ = false;
  std::thread thread_;
};

// A port on 127.0.0.1 where nothing listens, for as long as the object lives: bound (so no
// other program can take it meanwhile) and never listening, so a connection to it is
// refused at once. Unlike a fixed port, it cannot happen to be in use.
class RefusingPort {
 public:
  RefusingPort();
  ~RefusingPort();
  RefusingPort(const RefusingPort&) = delete;
  RefusingPort& operator=(const RefusingPort&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// "HTTP/1.1 200 OK" with `body` and its length, and Connection: close.
std::string http_ok(const std::string& body);

}  // namespace nsbox::test
