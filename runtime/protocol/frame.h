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

// What a message's JSON may hold besides its bytes (0: no bound), checked on its text
// before it is parsed. A parsed document costs up to ~100 bytes a value (nlohmann 3.11,
// measured: 56 for `[]`, 96 for an object's member, 100 for a short string), so 4 MiB of
// `[[],[],...]` became 78 MB; and copying or dumping a document recurses once per level
// (2 million levels overflowed the supervisor's stack).
struct ParseLimits {
  int max_depth = 0;
  size_t max_values = 0;
};
// For messages from a process the sandbox controls: the kernel's channel, the tool
// bridge's socket (docs/tools.md, "Limits"). 64 levels, as the API and CLI allow.
inline constexpr ParseLimits kUntrustedJson{64, 1u << 16};
// For answers from outside that the tool bridge relays (a tool remote, an LLM, a tool
// program) and the supervisor reads from the bridge: deeper than any real API nests, and
// at most ~64 MiB once parsed; past them an answer is refused, never crashes a process.
inline constexpr ParseLimits kAnswerJson{256, 1u << 19};
// What one value can cost parsed, at most (above): for weighing a message's memory.
inline constexpr size_t kParsedValueBytes = 128;

struct Frame {
  Json message;
  std::vector<UniqueFd> fds;
  size_t bytes = 0;  // the length of its JSON text
};

std::string encode(const Json& message);

// Blocking send of one frame, with optional fds. EINTR is retried; EPIPE is an error.
Result<void> send_frame(int sock, const Json& message, std::span<const int> fds = {});

// Blocking receive of one frame; nullopt on a clean EOF between frames. A frame past
// `limits` is a protocol error, like one that is not JSON.
Result<std::optional<Frame>> recv_frame(int sock, size_t max_bytes, ParseLimits limits = {});

// Incremental reader for non-blocking sockets in an event loop.
class FrameReader {
 public:
  explicit FrameReader(size_t max_bytes, ParseLimits limits = {}) : max_bytes_(max_bytes), limits_(limits) {}

  enum class Status { kOpen, kClosed };
  // Reads what is available now, until EAGAIN or `budget` bytes, never more (a writer
  // that never stops must not hold an event loop in one callback: level-triggered, the
  // loop comes back for the rest after the other ready fds). Complete frames are queued
  // as text. An oversized length is a protocol error (the stream cannot be
  // resynchronised).
  Result<Status> read_available(int sock, size_t budget = kDefaultReadBudget);
  static constexpr size_t kDefaultReadBudget = 1u << 20;

  bool has_frame() const { return !ready_.empty(); }
  // The next complete frame, parsed now: one document at a time is in memory, not one
  // per frame of a read. A frame that is not JSON, or is past the limits, is an error the
  // caller can answer and go on from.
  Result<Frame> next();

  // Bytes read of frames not complete yet, and the length the first of them declares
  // (once its 4-byte header is in): for a caller that bounds what its readers hold.
  size_t buffered() const { return buffer_.size(); }
  std::optional<size_t> next_length() const;
  // Stream bytes taken out as complete frames so far.
  uint64_t consumed() const { return buffer_offset_; }

 private:
  // A recvmsg that returns fds stops right after the bytes sent with them (the kernel
  // does not read past them), so they belong to the frame holding the last byte read.
  struct PendingFd {
    uint64_t offset;  // stream offset of that byte
    UniqueFd fd;
  };
  struct Unparsed {
    std::string text;
    std::vector<UniqueFd> fds;
  };
  size_t max_bytes_;
  ParseLimits limits_;
  std::string buffer_;
  uint64_t buffer_offset_ = 0;  // stream offset of buffer_[0]
  std::vector<PendingFd> pending_fds_;
  std::deque<Unparsed> ready_;
  void extract_frames();
};

// Hands each complete frame of `reader` to `handle`. Frames from a process the sandbox
// controls are untrusted: a malformed one, or one `handle` finds mistyped (nlohmann
// throws), is skipped and logged (rate-limited: a sandbox can send millions) as coming
// from `source`. Returns how many were skipped, for the caller to bound. `handle` may
// move parts out of the message (a call's arguments can be megabytes: not copied).
size_t dispatch_untrusted(FrameReader& reader, std::string_view source, const std::function<void(Json&)>& handle);

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

// What JSON text holds, read without parsing it (strings aside, as above): its deepest
// nesting of objects and arrays, and an upper bound on its values (1 + commas +
// containers: exact for valid JSON, but for an empty container, counted once more; an
// object's member is one value).
struct JsonShape {
  int depth = 0;
  size_t values = 0;
};
JsonShape measure_json(std::string_view json);
// What `shape` exceeds, said of `what` ("the call nests deeper than 64 levels"), or
// empty within `limits`.
std::string past_limits(const JsonShape& shape, const ParseLimits& limits, std::string_view what);

}  // namespace nsbox::protocol
