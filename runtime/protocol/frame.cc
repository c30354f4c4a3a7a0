#include "runtime/protocol/frame.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "isolation/sys/fd_passing.h"
#include "isolation/sys/log.h"
#include "isolation/sys/syscall.h"

namespace nsbox::protocol {
namespace {

constexpr int kSendTimeoutMs = 10000;

uint32_t read_be32(const char* p) {
  auto b = reinterpret_cast<const unsigned char*>(p);
  return (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | uint32_t(b[3]);
}

Result<Frame> parse(std::string_view payload, std::vector<UniqueFd> fds, const ParseLimits& limits) {
  if (limits.max_depth > 0 || limits.max_values > 0)
    if (std::string past = past_limits(measure_json(payload), limits, "it"); !past.empty())
      return fail(make_error(ErrorCode::kProtocol, "malformed message: " + past));
  Json message = Json::parse(payload, nullptr, /*allow_exceptions=*/false);
  if (message.is_discarded() || !message.is_object())
    return fail(make_error(ErrorCode::kProtocol, "malformed message: not a JSON object"));
  return Frame{std::move(message), std::move(fds), payload.size()};
}

// A reader's buffer keeps its capacity when frames are taken out of it: one 4 MiB frame
// would hold 4 MiB for as long as the connection stays, on each connection.
constexpr size_t kKeptCapacity = 256u << 10;

void take_fds(msghdr& msg, std::vector<UniqueFd>& out) {
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      out.emplace_back(fd);
    }
  }
}

// recvmsg that collects any fds; returns bytes read (0 = EOF) or -1 with errno.
ssize_t recv_some(int sock, char* buf, size_t len, std::vector<UniqueFd>& fds) {
  iovec io{buf, len};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerFrame)];
  msghdr msg{};
  msg.msg_iov = &io;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n = sys::retry_eintr([&] { return ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC); });
  if (n >= 0) take_fds(msg, fds);
  return n;
}

}  // namespace

std::string encode(const Json& message) {
  std::string body = message.dump(-1, ' ', false, Json::error_handler_t::replace);
  uint32_t n = static_cast<uint32_t>(body.size());
  std::string out(4, '\0');
  out[0] = char(n >> 24);
  out[1] = char(n >> 16);
  out[2] = char(n >> 8);
  out[3] = char(n);
  return out + body;
}

Result<void> send_frame(int sock, const Json& message, std::span<const int> fds) {
  std::string bytes = encode(message);
  size_t sent = 0;
  while (sent < bytes.size()) {
    // The fds go with the first bytes only.
    ssize_t n = sys::send_with_fds(sock, bytes.data() + sent, bytes.size() - sent, sent == 0 ? fds : std::span<const int>());
    if (n < 0 && errno == EAGAIN) {
      // A non-blocking peer socket that is full: wait for room, bounded.
      pollfd p{sock, POLLOUT, 0};
      if (sys::retry_eintr([&] { return ::poll(&p, 1, kSendTimeoutMs); }) <= 0)
        return fail(make_error(ErrorCode::kTimeout, "send message: the peer read nothing for 10 s"));
      continue;
    }
    if (n < 0) return fail(sys_error("send message"));
    sent += static_cast<size_t>(n);
  }
  return {};
}

Result<std::optional<Frame>> recv_frame(int sock, size_t max_bytes, ParseLimits limits) {
  std::vector<UniqueFd> fds;
  char header[4];
  size_t got = 0;
  while (got < 4) {
    ssize_t n = recv_some(sock, header + got, 4 - got, fds);
    if (n < 0) return fail(sys_error("receive message"));
    if (n == 0) {
      if (got == 0) return std::optional<Frame>();
      return fail(make_error(ErrorCode::kProtocol, "connection closed inside a message header"));
    }
    got += static_cast<size_t>(n);
  }
  uint32_t len = read_be32(header);
  if (len > max_bytes)
    return fail(make_error(ErrorCode::kProtocol, "message of " + std::to_string(len) +
                                                     " bytes is larger than the limit of " + std::to_string(max_bytes)));
  std::string payload(len, '\0');
  got = 0;
  while (got < len) {
    ssize_t n = recv_some(sock, payload.data() + got, len - got, fds);
    if (n < 0) return fail(sys_error("receive message"));
    if (n == 0) return fail(make_error(ErrorCode::kProtocol, "connection closed inside a message"));
    got += static_cast<size_t>(n);
  }
  auto frame = NSBOX_TRY(parse(payload, std::move(fds), limits));
  return std::optional<Frame>(std::move(frame));
}

Result<FrameReader::Status> FrameReader::read_available(int sock, size_t budget) {
  char buf[65536];
  for (size_t taken = 0; taken < budget;) {
    std::vector<UniqueFd> fds;
    ssize_t n = recv_some(sock, buf, std::min(sizeof buf, budget - taken), fds);
    if (n > 0)
      for (auto& fd : fds) pending_fds_.push_back({buffer_offset_ + buffer_.size() + static_cast<uint64_t>(n) - 1, std::move(fd)});
    if (pending_fds_.size() > static_cast<size_t>(kMaxFdsPerFrame) * 4)
      return fail(make_error(ErrorCode::kProtocol, "too many file descriptors sent without a complete message"));
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == ECONNRESET) return Status::kClosed;
      return fail(sys_error("receive message"));
    }
    if (n == 0) {
      extract_frames();
      return Status::kClosed;
    }
    buffer_.append(buf, static_cast<size_t>(n));
    taken += static_cast<size_t>(n);
    if (buffer_.size() >= 4 && read_be32(buffer_.data()) > max_bytes_)
      return fail(make_error(ErrorCode::kProtocol,
                             "message of " + std::to_string(read_be32(buffer_.data())) +
                                 " bytes is larger than the limit of " + std::to_string(max_bytes_)));
    extract_frames();
  }
  return Status::kOpen;
}

void FrameReader::extract_frames() {
  size_t pos = 0;
  while (buffer_.size() - pos >= 4) {
    uint32_t len = read_be32(buffer_.data() + pos);
    if (len > max_bytes_ || buffer_.size() - pos - 4 < len) break;
    uint64_t end = buffer_offset_ + pos + 4 + len;  // one past the frame's last byte
    std::vector<UniqueFd> fds;
    while (!pending_fds_.empty() && pending_fds_.front().offset < end) {
      fds.push_back(std::move(pending_fds_.front().fd));
      pending_fds_.erase(pending_fds_.begin());
    }
    if (pos == 0 && 4 + len == buffer_.size()) {  // the whole buffer, as a reader of one frame at a time has: not copied
      buffer_.erase(0, 4);
      ready_.push_back({std::move(buffer_), std::move(fds)});
      buffer_.clear();
      buffer_offset_ += 4 + len;
      return;
    }
    ready_.push_back({buffer_.substr(pos + 4, len), std::move(fds)});
    pos += 4 + len;
  }
  buffer_.erase(0, pos);
  buffer_offset_ += pos;
  if (buffer_.capacity() > kKeptCapacity && buffer_.size() < kKeptCapacity / 2) buffer_.shrink_to_fit();
}

Result<Frame> FrameReader::next() {
  Unparsed f = std::move(ready_.front());
  ready_.pop_front();
  return parse(f.text, std::move(f.fds), limits_);
}

std::optional<size_t> FrameReader::next_length() const {
  if (buffer_.size() < 4) return std::nullopt;
  return read_be32(buffer_.data());
}

size_t dispatch_untrusted(FrameReader& reader, std::string_view source, const std::function<void(Json&)>& handle) {
  size_t skipped = 0;
  while (reader.has_frame()) {
    auto frame = reader.next();
    if (!frame) {
      ++skipped;
      log::limited(log::Level::kWarn, "malformed-frame", "ignored a malformed message from " + std::string(source));
      continue;
    }
    try {
      handle(frame->message);
    } catch (const Json::exception& e) {
      ++skipped;
      log::limited(log::Level::kWarn, "mistyped-frame",
                   "ignored a malformed message from " + std::string(source) + ": " + e.what());
    }
  }
  return skipped;
}

// Unicode's table of well-formed byte sequences (Table 3-7): no overlong forms, no
// surrogates, nothing past U+10FFFF. JSON would rewrite any of those, and bytes must
// cross nsbox unchanged.
size_t utf8_sequence_length(std::string_view s) {
  if (s.empty()) return 0;
  auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  unsigned char c = b(0);
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c == 0xE0) n = 3, lo = 0xA0;
  else if (c >= 0xE1 && c <= 0xEC) n = 3;
  else if (c == 0xED) n = 3, hi = 0x9F;
  else if (c >= 0xEE && c <= 0xEF) n = 3;
  else if (c == 0xF0) n = 4, lo = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) n = 4;
  else if (c == 0xF4) n = 4, hi = 0x8F;
  else return 0;
  if (s.size() < n || b(1) < lo || b(1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if ((b(k) & 0xC0) != 0x80) return 0;
  return n;
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t n = utf8_sequence_length(s.substr(i));
    if (n == 0) return false;
    i += n;
  }
  return true;
}

namespace {
constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}

std::string base64_encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    out += {kB64[v >> 18], kB64[(v >> 12) & 63], kB64[(v >> 6) & 63], kB64[v & 63]};
  }
  if (i + 1 == in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    out += {kB64[v >> 18], kB64[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == in.size()) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += {kB64[v >> 18], kB64[(v >> 12) & 63], kB64[(v >> 6) & 63], '='};
  }
  return out;
}

Result<std::string> base64_decode(std::string_view in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (in.size() % 4 != 0) return fail(make_error(ErrorCode::kProtocol, "base64 text of odd length"));
  std::string out;
  for (size_t i = 0; i < in.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      if (in[i + k] == '=' && i + 4 == in.size() && k >= 2) { v[k] = 0; ++pad; continue; }
      v[k] = value(in[i + k]);
      if (v[k] < 0) return fail(make_error(ErrorCode::kProtocol, "invalid base64 text"));
    }
    uint32_t n = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    out += char(n >> 16);
    if (pad < 2) out += char((n >> 8) & 0xff);
    if (pad < 1) out += char(n & 0xff);
  }
  return out;
}

void put_bytes(Json& message, std::string_view bytes) {
  if (is_valid_utf8(bytes))
    message["data"] = std::string(bytes);
  else
    message["data_b64"] = base64_encode(bytes);
}

std::string get_bytes(const Json& message) {
  if (auto it = message.find("data"); it != message.end() && it->is_string()) return it->get<std::string>();
  if (auto it = message.find("data_b64"); it != message.end() && it->is_string()) {
    auto decoded = base64_decode(it->get<std::string>());
    if (decoded) return *decoded;
  }
  return {};
}

bool nests_deeper_than(std::string_view json, int max) { return measure_json(json).depth > max; }

JsonShape measure_json(std::string_view json) {
  JsonShape shape{0, 1};
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : json) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++shape.values;
      shape.depth = std::max(shape.depth, ++depth);
    } else if (c == '}' || c == ']') {
      --depth;
    } else if (c == ',') {
      ++shape.values;
    }
  }
  return shape;
}

std::string past_limits(const JsonShape& shape, const ParseLimits& limits, std::string_view what) {
  if (limits.max_depth > 0 && shape.depth > limits.max_depth)
    return std::string(what) + " nests deeper than " + std::to_string(limits.max_depth) + " levels";
  if (limits.max_values > 0 && shape.values > limits.max_values)
    return std::string(what) + " holds more than " + std::to_string(limits.max_values) + " values";
  return {};
}

}  // namespace nsbox::protocol
