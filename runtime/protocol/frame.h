// Frames: how every nsbox process talks to another over a unix socket.
//
// One frame = a 4-byte big-endian length, then that many bytes of UTF-8 JSON (one
// message). File descriptors travel as SCM_RIGHTS attached to a frame's first bytes.
// docs/protocol.md lists the messages.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox::protocol {

using Json = nlohmann::json;

// Largest message a supervisor accepts from a client (a cell of 10 MiB fits) and from init.
constexpr size_t kMaxClientFrame = 16u << 20;
constexpr size_t kMaxInitFrame = 1u << 20;
constexpr int kMaxFdsPerFrame = 4;

struct Frame {
  Json message;
  std::vector<UniqueFd> fds;
};

std::string encode(const Json& message);

// Blocking send of one frame, with optional fds. EINTR is retried; EPIPE is an error.
Result<void> send_frame(int sock, const Json& message, std::span<const int> fds = {});

// Blocking receive of one frame; nullopt on a clean EOF between frames.
Result<std::optional<Frame>> recv_frame(int sock, size_t max_bytes);

// Incremental reader for non-blocking sockets in an event loop.
class FrameReader {
 public:
  explicit FrameReader(size_t max_bytes) : max_bytes_(max_bytes) {}

  enum class Status { kOpen, kClosed };
  // Reads what is available now, until EAGAIN or `budget` bytes (a writer that never
  // stops must not hold an event loop in one callback: level-triggered, the loop comes
  // back for the rest after the other ready fds). Complete frames are queued. An
  // oversized length is a protocol error (the stream cannot be resynchronised); a frame
  // that is not JSON is queued as an error frame so the caller can answer it and go on.
  Result<Status> read_available(int sock, size_t budget = kDefaultReadBudget);
  static constexpr size_t kDefaultReadBudget = 1u << 20;

  bool has_frame() const { return !ready_.empty(); }
  Result<Frame> next();

 private:
  // A recvmsg that returns fds stops right after the bytes sent with them (the kernel
  // does not read past them), so they belong to the frame holding the last byte read.
  struct PendingFd {
    uint64_t offset;  // stream offset of that byte
    UniqueFd fd;
  };
  size_t max_bytes_;
  std::string buffer_;
  uint64_t buffer_offset_ = 0;  // stream offset of buffer_[0]
  std::vector<PendingFd> pending_fds_;
  std::deque<Result<Frame>> ready_;
  void extract_frames();
};

// Hands each complete frame of `reader` to `handle`. Frames from a process the sandbox
// controls are untrusted: a malformed one, or one `handle` finds mistyped (nlohmann
// throws), is skipped and logged (rate-limited: a sandbox can send millions) as coming
// from `source`. Returns how many were skipped, for the caller to bound.
size_t dispatch_untrusted(FrameReader& reader, std::string_view source, const std::function<void(const Json&)>& handle);

// Output of a command as JSON text: valid UTF-8 goes in "data" as is; anything else is
// base64 in "data_b64", so bytes are never lost or mangled.
void put_bytes(Json& message, std::string_view bytes);
std::string get_bytes(const Json& message);
bool is_valid_utf8(std::string_view s);  // well-formed UTF-8, exactly as Unicode defines it
// The length (1-4) of the well-formed sequence that `s` starts with; 0 if it does not.
size_t utf8_sequence_length(std::string_view s);
std::string base64_encode(std::string_view in);
Result<std::string> base64_decode(std::string_view in);
// Whether JSON text nests objects and arrays deeper than `max` (brackets inside strings
// aside): hostile text is refused before it is parsed, since copying or walking a
// deeply nested document recurses.
bool nests_deeper_than(std::string_view json, int max);

}  // namespace nsbox::protocol
