#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <thread>
#include <vector>

#include "runtime/protocol/frame.h"

using namespace nsbox;
using protocol::Json;

namespace {
struct SocketPair {
  int a = -1, b = -1;
  SocketPair() {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    a = fds[0];
    b = fds[1];
  }
  ~SocketPair() { ::close(a); ::close(b); }
};
}  // namespace

TEST_CASE("a frame is a big-endian length and JSON, and carries file descriptors") {
  SocketPair sp;
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  REQUIRE(protocol::send_frame(sp.a, {{"op", "spawn"}, {"id", 7}}, std::vector<int>{pipe_fds[1]}));
  auto frame = protocol::recv_frame(sp.b, 1 << 20);
  REQUIRE(frame);
  REQUIRE(frame->has_value());
  CHECK((*frame)->message["op"] == "spawn");
  CHECK((*frame)->message["id"] == 7);
  REQUIRE((*frame)->fds.size() == 1);
  REQUIRE(::write((*frame)->fds[0].get(), "z", 1) == 1);  // the passed fd is the pipe's write end
  char c = 0;
  REQUIRE(::read(pipe_fds[0], &c, 1) == 1);
  CHECK(c == 'z');
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);

  std::string bytes = protocol::encode({{"a", 1}});
  CHECK(bytes.substr(0, 4) == std::string("\0\0\0\x07", 4));
}

TEST_CASE("an oversized frame is refused without reading it, EOF between frames is clean") {
  SocketPair sp;
  uint32_t huge = htonl(64u << 20);
  REQUIRE(::write(sp.a, &huge, 4) == 4);
  auto frame = protocol::recv_frame(sp.b, 16u << 20);
  REQUIRE_FALSE(frame);
  CHECK(frame.error().code == ErrorCode::kProtocol);
  CHECK(frame.error().message.find("larger than the limit") != std::string::npos);

  SocketPair sp2;
  ::shutdown(sp2.a, SHUT_WR);
  auto eof = protocol::recv_frame(sp2.b, 1024);
  REQUIRE(eof);
  CHECK_FALSE(eof->has_value());
}

TEST_CASE("the incremental reader splits frames, reports malformed ones and goes on") {
  SocketPair sp;
  std::string garbage = "not json";
  uint32_t len = htonl(static_cast<uint32_t>(garbage.size()));
  std::string stream = std::string(reinterpret_cast<char*>(&len), 4) + garbage + protocol::encode({{"op", "ping"}});
  REQUIRE(::write(sp.a, stream.data(), stream.size()) == static_cast<ssize_t>(stream.size()));
  ::fcntl(sp.b, F_SETFL, O_NONBLOCK);  // as in the supervisor's event loop
  protocol::FrameReader reader(1 << 20);
  auto status = reader.read_available(sp.b);
  REQUIRE(status);
  REQUIRE(reader.has_frame());
  auto bad = reader.next();
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("malformed") != std::string::npos);
  REQUIRE(reader.has_frame());
  auto good = reader.next();
  REQUIRE(good);
  CHECK(good->message["op"] == "ping");
}

TEST_CASE("output bytes survive JSON: UTF-8 as text, anything else as base64") {
  Json a, b;
  protocol::put_bytes(a, "héllo\n");
  CHECK(a.contains("data"));
  CHECK(protocol::get_bytes(a) == "héllo\n");
  std::string binary("\xff\x00\x01\xfe", 4);
  protocol::put_bytes(b, binary);
  CHECK(b.contains("data_b64"));
  CHECK(protocol::get_bytes(b) == binary);
  for (std::string s : {"", "a", "ab", "abc", "abcd"}) CHECK(*protocol::base64_decode(protocol::base64_encode(s)) == s);
  CHECK_FALSE(protocol::is_valid_utf8("\xc3"));
  CHECK_FALSE(protocol::base64_decode("a*=="));
}

TEST_CASE("fds sent with the second of two queued frames belong to the second") {
  SocketPair sp;
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  REQUIRE(protocol::send_frame(sp.a, {{"n", 1}}));
  REQUIRE(protocol::send_frame(sp.a, {{"n", 2}}, std::vector<int>{pipe_fds[0]}));
  ::fcntl(sp.b, F_SETFL, O_NONBLOCK);
  protocol::FrameReader reader(1 << 20);
  REQUIRE(reader.read_available(sp.b));
  while (!reader.has_frame()) REQUIRE(reader.read_available(sp.b));
  auto first = reader.next();
  REQUIRE(first);
  CHECK(first->message["n"] == 1);
  CHECK(first->fds.empty());
  while (!reader.has_frame()) REQUIRE(reader.read_available(sp.b));
  auto second = reader.next();
  REQUIRE(second);
  CHECK(second->message["n"] == 2);
  CHECK(second->fds.size() == 1);
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}

TEST_CASE("JSON's shape is read without parsing it: nesting, and an upper bound on values exact but for empty containers") {
  using protocol::measure_json;
  CHECK(measure_json("7").depth == 0);
  CHECK(measure_json("7").values == 1);
  CHECK(measure_json(R"({"a": [1, 2, {"b": null}], "c": "x"})").depth == 3);
  CHECK(measure_json(R"({"a": [1, 2, {"b": null}], "c": "x"})").values == 7);  // root, a, 1, 2, {}, b, c
  CHECK(measure_json("[[],[],[]]").values == 4 + 3);  // each empty one counted once more
  // Brackets and commas inside strings, escaped quotes included, are text.
  CHECK(measure_json(R"(["[[[,,,{{", "\"[,", "\\"])").depth == 1);
  CHECK(measure_json(R"(["[[[,,,{{", "\"[,", "\\"])").values == 4);
  CHECK(protocol::past_limits(measure_json(std::string(65, '[') + std::string(65, ']')), protocol::kUntrustedJson, "it") ==
        "it nests deeper than 64 levels");
  CHECK(protocol::past_limits(measure_json(std::string(64, '[') + std::string(64, ']')), protocol::kUntrustedJson, "it") == "");
  std::string wide = "[0";
  for (int i = 0; i < 70000; ++i) wide += ",0";
  wide += "]";
  CHECK(protocol::past_limits(measure_json(wide), protocol::kUntrustedJson, "the call") ==
        "the call holds more than 65536 values");
}

TEST_CASE("a reader with limits refuses a frame past them before parsing it, and reads the next") {
  SocketPair sp;
  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  std::string wide = "[";
  for (int i = 0; i < 100000; ++i) wide += "[],";
  wide += "[]]";
  std::string stream;
  for (const std::string& body : {"{\"a\":" + deep + "}", "{\"a\":" + wide + "}"}) {
    uint32_t len = htonl(static_cast<uint32_t>(body.size()));
    stream += std::string(reinterpret_cast<char*>(&len), 4) + body;
  }
  stream += protocol::encode({{"op", "ping"}});
  std::thread writer([&] { REQUIRE(::write(sp.a, stream.data(), stream.size()) == static_cast<ssize_t>(stream.size())); });
  ::fcntl(sp.b, F_SETFL, O_NONBLOCK);
  protocol::FrameReader reader(1 << 20, protocol::kUntrustedJson);
  std::vector<Result<protocol::Frame>> frames;
  while (frames.size() < 3) {
    REQUIRE(reader.read_available(sp.b));
    while (reader.has_frame()) frames.push_back(reader.next());
  }
  writer.join();
  REQUIRE_FALSE(frames[0]);
  CHECK(frames[0].error().message == "malformed message: it nests deeper than 64 levels");
  REQUIRE_FALSE(frames[1]);
  CHECK(frames[1].error().message == "malformed message: it holds more than 65536 values");
  REQUIRE(frames[2]);
  CHECK(frames[2]->message["op"] == "ping");
  CHECK(frames[2]->bytes == 13);

  // recv_frame refuses the same.
  SocketPair sp2;
  std::string one = stream.substr(0, 4 + deep.size() + 6);
  std::thread writer2([&] { REQUIRE(::write(sp2.a, one.data(), one.size()) == static_cast<ssize_t>(one.size())); });
  auto refused = protocol::recv_frame(sp2.b, 1 << 20, protocol::kUntrustedJson);
  writer2.join();
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message.find("64 levels") != std::string::npos);
}

TEST_CASE("a reader reads no more than its budget, and says what a partial frame declares") {
  SocketPair sp;
  std::string stream = protocol::encode({{"text", std::string(1000, 'x')}}) + protocol::encode({{"n", 2}});
  REQUIRE(::write(sp.a, stream.data(), stream.size()) == static_cast<ssize_t>(stream.size()));
  ::fcntl(sp.b, F_SETFL, O_NONBLOCK);
  protocol::FrameReader reader(1 << 20);
  CHECK_FALSE(reader.next_length());
  REQUIRE(reader.read_available(sp.b, 3));
  CHECK(reader.buffered() == 3);
  CHECK_FALSE(reader.next_length());
  REQUIRE(reader.read_available(sp.b, 1));
  REQUIRE(reader.next_length());
  const size_t first = *reader.next_length();
  CHECK(first == stream.size() - protocol::encode({{"n", 2}}).size() - 4);
  REQUIRE(reader.read_available(sp.b, first));  // exactly the rest of the first frame
  CHECK(reader.buffered() == 0);
  CHECK(reader.consumed() == 4 + first);
  REQUIRE(reader.has_frame());
  CHECK(reader.next()->message["text"].get<std::string>().size() == 1000);
  CHECK_FALSE(reader.has_frame());
  REQUIRE(reader.read_available(sp.b));
  REQUIRE(reader.has_frame());
  CHECK(reader.next()->message["n"] == 2);
}
