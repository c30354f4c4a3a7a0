// Frames as the supervisor reads them from a socket whose other end a sandbox controls
// (init's and the kernel's channels) or a client writes: the input is the byte stream, cut
// into writes by a control word taken from its end, some writes carrying a file
// descriptor (SCM_RIGHTS). FrameReader reads it on a non-blocking socket as the event
// loop does; recv_frame reads the same bytes on a blocking one.
//
// Checks: every frame handed out is a JSON object that survives encode() unchanged, and
// within the reader's parse limits when it has some; no more descriptors come out than
// went in, and none is left open afterwards; a stream of well-formed frames gives back
// exactly the frames written, less those past the limits; measure_json's shape of a
// payload bounds the document parsed from it (its depth and values, an empty container
// counted once more), so that what it lets through costs what it says.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <fuzzer/FuzzedDataProvider.h>

#include "runtime/protocol/frame.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using nsbox::protocol::Frame;
using nsbox::protocol::FrameReader;
using nsbox::protocol::Json;
using nsbox::protocol::ParseLimits;

struct Pair {
  int writer = -1, reader = -1;
  explicit Pair(bool nonblocking) {
    int fds[2];
    FUZZ_CHECK(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    writer = fds[0];
    reader = fds[1];
    if (nonblocking) {
      FUZZ_CHECK(::fcntl(reader, F_SETFL, O_NONBLOCK) == 0);
      FUZZ_CHECK(::fcntl(writer, F_SETFL, O_NONBLOCK) == 0);
    }
  }
  ~Pair() {
    ::close(writer);
    ::close(reader);
  }
};

// One write of `bytes`, with a descriptor attached when `with_fd`. False when the socket is full.
bool send_chunk(int sock, std::string_view bytes, bool with_fd, int fd_to_send) {
  iovec io{const_cast<char*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &io;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (with_fd) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd_to_send, sizeof(int));
  }
  return ::sendmsg(sock, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
}

void check_frame(const Frame& frame, const ParseLimits& limits) {
  FUZZ_CHECK(frame.message.is_object());
  FUZZ_CHECK(frame.fds.size() <= static_cast<size_t>(nsbox::protocol::kMaxFdsPerFrame) * 4);
  std::string encoded = nsbox::protocol::encode(frame.message);
  FUZZ_CHECK(encoded.size() >= 4);
  Json again = nsbox::fuzz::parse_json(std::string_view(encoded).substr(4));
  FUZZ_CHECK(again == frame.message || nsbox::fuzz::has_non_finite(frame.message));
  FUZZ_CHECK(nsbox::protocol::past_limits(nsbox::protocol::measure_json(std::string_view(encoded).substr(4)), limits, "it")
                 .empty());
}

// A parsed document's real depth, its values (a member of an object is one) and its
// empty containers, walked without recursion (the document may be deep).
struct RealShape {
  int depth = 0;
  size_t values = 0, empty = 0;
};
RealShape real_shape(const Json& root) {
  RealShape shape;
  std::vector<std::pair<const Json*, int>> todo{{&root, 1}};
  while (!todo.empty()) {
    auto [j, level] = todo.back();
    todo.pop_back();
    ++shape.values;
    if (!j->is_structured()) continue;
    shape.depth = std::max(shape.depth, level);
    if (j->empty()) ++shape.empty;
    for (const Json& member : *j) todo.emplace_back(&member, level + 1);
  }
  return shape;
}

// measure_json bounds what parsing gives (duplicate keys can make the document smaller).
void check_shape(std::string_view payload, const Json& parsed) {
  auto measured = nsbox::protocol::measure_json(payload);
  RealShape real = real_shape(parsed);
  FUZZ_CHECK(measured.depth >= real.depth);
  FUZZ_CHECK(measured.values >= real.values + real.empty);
}

// The lowest free descriptor number: it rises if a run leaks a descriptor.
int lowest_free_fd() {
  int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ::close(fd);
  return fd;
}

uint64_t splitmix(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Whether `stream` is a sequence of whole frames whose payloads are JSON objects: then
// every reader must give back exactly those within `limits`.
std::vector<Json> well_formed_frames(std::string_view stream, size_t max_bytes, const ParseLimits& limits) {
  std::vector<Json> frames;
  while (!stream.empty()) {
    if (stream.size() < 4) return {};
    auto b = reinterpret_cast<const unsigned char*>(stream.data());
    uint32_t len = (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | b[3];
    if (len > max_bytes || stream.size() - 4 < len) return {};
    Json j = nsbox::fuzz::parse_json(stream.substr(4, len));
    if (j.is_discarded() || !j.is_object()) return {};
    check_shape(stream.substr(4, len), j);
    if (nsbox::protocol::past_limits(nsbox::protocol::measure_json(stream.substr(4, len)), limits, "it").empty())
      frames.push_back(std::move(j));
    stream.remove_prefix(4 + len);
  }
  return frames;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd_to_send = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  static const int baseline_fd = lowest_free_fd();

  FuzzedDataProvider in(data, size);
  uint64_t plan = in.ConsumeIntegral<uint64_t>();  // from the input's end
  std::string stream = in.ConsumeRemainingBytesAsString();
  // Small limits, so that the fuzzer reaches them; kMaxInitFrame is what init gets.
  const size_t max_bytes = (plan & 1) ? 64 : (plan & 2) ? 4096 : nsbox::protocol::kMaxInitFrame;
  const bool through_dispatch = plan & 4;
  // Small limits, also reached, on a reader of frames from a sandbox.
  const ParseLimits limits = (plan & 8) ? ParseLimits{3, 12} : ParseLimits{};
  std::vector<Json> expected = well_formed_frames(stream, max_bytes, limits);
  const bool any_frame = !well_formed_frames(stream, max_bytes, {}).empty() || stream.empty();

  size_t fds_sent = 0, fds_received = 0;
  std::vector<Json> read_back;
  bool failed = false;
  {
    Pair pair(/*nonblocking=*/true);
    FrameReader reader(max_bytes, limits);
    auto drain = [&] {
      if (through_dispatch) {
        // As the supervisor takes the kernel's frames: typed access that may throw.
        nsbox::protocol::dispatch_untrusted(reader, "the fuzzer", [&](Json& m) {
          read_back.push_back(m);
          (void)nsbox::protocol::get_bytes(m);
          (void)m.value("id", uint64_t{0});
          (void)m.value("event", std::string());
        });
        return;
      }
      while (reader.has_frame()) {
        auto frame = reader.next();
        if (!frame) continue;
        check_frame(*frame, limits);
        fds_received += frame->fds.size();
        read_back.push_back(frame->message);
      }
    };
    uint64_t state = plan;
    size_t at = 0;
    while (at < stream.size() && !failed) {
      size_t chunk = 1 + splitmix(state) % ((plan >> 8) % 2 ? 7 : 512);
      chunk = std::min(chunk, stream.size() - at);
      bool with_fd = (splitmix(state) & 7) == 0;
      if (!send_chunk(pair.writer, std::string_view(stream).substr(at, chunk), with_fd, fd_to_send)) break;
      fds_sent += with_fd;
      at += chunk;
      auto status = reader.read_available(pair.reader);
      if (!status) failed = true;
      drain();
    }
    ::shutdown(pair.writer, SHUT_WR);
    while (!failed) {
      auto status = reader.read_available(pair.reader);
      if (!status) break;
      drain();
      if (*status == FrameReader::Status::kClosed) break;
    }
    drain();
  }
  FUZZ_CHECK(fds_received <= fds_sent);
  if (any_frame) FUZZ_CHECK(read_back == expected);

  // The same bytes through the blocking reader, without descriptors.
  {
    Pair pair(/*nonblocking=*/false);
    if (stream.size() <= 64 * 1024 && send_chunk(pair.writer, stream, false, -1)) {
      ::shutdown(pair.writer, SHUT_WR);
      std::vector<Json> frames;
      for (;;) {
        auto frame = nsbox::protocol::recv_frame(pair.reader, max_bytes, limits);
        if (!frame || !*frame) break;
        check_frame(**frame, limits);
        frames.push_back((*frame)->message);
      }
      // recv_frame stops at the first frame past the limits (a protocol error).
      if (any_frame && expected.size() == well_formed_frames(stream, max_bytes, {}).size()) FUZZ_CHECK(frames == expected);
    }
  }
  FUZZ_CHECK(lowest_free_fd() == baseline_fd);
  return 0;
}
