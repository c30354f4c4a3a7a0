// What the S3 client puts on the wire for path-style and virtual-host addressing, seen by
// a one-shot HTTP server on loopback that records the request and answers a listing.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <thread>

#include "mounts/bucket/bucket_client.h"

using namespace nsbox::bucket;

namespace {

class OneRequestServer {
 public:
  OneRequestServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    REQUIRE(::listen(fd_, 4) == 0);
    thread_ = std::thread([this] { serve(); });
  }
  ~OneRequestServer() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  int port() const { return port_; }
  std::string request() {
    thread_.join();
    thread_ = std::thread([] {});
    return request_;
  }

 private:
  void serve() {
    int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) return;
    timeval tv{10, 0};
    ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[4096];
    while (request_.find("\r\n\r\n") == std::string::npos) {
      ssize_t n = ::read(c, buf, sizeof buf);
      if (n <= 0) break;
      request_.append(buf, static_cast<size_t>(n));
    }
    std::string body = "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>";
    std::string reply = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    (void)!::write(c, reply.data(), reply.size());
    ::close(c);
  }
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::string request_;
};

std::string header_line(const std::string& request, const std::string& name) {
  auto at = request.find("\r\n" + name + ": ");
  if (at == std::string::npos) return {};
  at += 2;
  return request.substr(at, request.find("\r\n", at) - at);
}

}  // namespace

TEST_CASE("path-style requests name the bucket in the path, virtual-host ones in the Host header") {
  BucketCredentials keys{"AKID", "secret", "", "", ""};
  {
    OneRequestServer server;
    auto mount = BucketMount::from_json({{"bucket", "photos"}, {"prefix", "2026"}, {"mount_path", "/d"},
                                         {"endpoint_url", "http://127.0.0.1:" + std::to_string(server.port())}});
    REQUIRE(mount);
    REQUIRE(make_s3_client(*mount, keys)->probe("2026/"));
    std::string request = server.request();
    CHECK(request.rfind("GET /photos/?", 0) == 0);
    CHECK(header_line(request, "Host") == "Host: 127.0.0.1:" + std::to_string(server.port()));
    CHECK(request.find("prefix=2026%2F") != std::string::npos);
    CHECK(header_line(request, "Authorization").find("SignedHeaders=host;x-amz-content-sha256;x-amz-date") != std::string::npos);
  }
  {
    OneRequestServer server;
    // *.localhost resolves to loopback inside libcurl: a virtual host without DNS.
    auto mount = BucketMount::from_json({{"bucket", "photos"}, {"mount_path", "/d"}, {"path_style", false},
                                         {"endpoint_url", "http://s3.localhost:" + std::to_string(server.port())}});
    REQUIRE(mount);
    REQUIRE(make_s3_client(*mount, keys)->probe(""));
    std::string request = server.request();
    CHECK(request.rfind("GET /?", 0) == 0);
    CHECK(header_line(request, "Host") == "Host: photos.s3.localhost:" + std::to_string(server.port()));
  }
  {
    OneRequestServer server;
    auto mount = BucketMount::from_json({{"bucket", "photos"}, {"mount_path", "/d"},
                                         {"endpoint_url", "http://127.0.0.1:" + std::to_string(server.port())}});
    REQUIRE(make_s3_client(*mount, {})->probe(""));  // anonymous: nothing signed
    std::string request = server.request();
    CHECK(header_line(request, "Authorization").empty());
    CHECK(header_line(request, "x-amz-date").empty());
  }
}
