// Host-side logs: one line per event, with a UTC timestamp, the program and a level.
//
//   2026-12-01T11:40:02.123Z nsbox-supervisor warn: ignored a malformed message from the kernel
//
// Every host-side process (supervisor, bucket servers) logs to stderr, which is a file
// in the state root, outside every quota and cgroup. Much of what is logged is caused by
// code in a sandbox (a malformed frame, a seccomp kill, a failed request), so a log must
// cost the host a bounded amount however hostile that code is:
//
//   - per kind of message (`limited`), a burst of lines and then one a second; what is
//     dropped is counted and said with the next line of that kind;
//   - per file: when a log opened with `open_file` reaches kMaxFileBytes it is renamed to
//     `<path>.1` (replacing an older one) and a fresh file is started, so a log and its
//     predecessor never hold more than twice that.
//
// Thread-safe (the bucket servers log from many threads).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "isolation/sys/error.h"

namespace nsbox::log {

enum class Level { kError, kWarn, kInfo };

constexpr uint64_t kMaxFileBytes = 4u << 20;
constexpr int kBurstLines = 20;  // per kind, before the rate of one a second applies

// The name at the start of each line ("nsbox-supervisor"). Call once, first.
void set_program(std::string_view name);

// Appends to `path` (0600, created if missing) and makes it stderr, with rotation.
// Without it, lines go to whatever stderr is, unrotated.
Result<void> open_file(const std::string& path);

// One line, always written (for what nsbox itself does: bounded by its own actions).
void write(Level level, std::string_view message);
// One line for an event the sandbox or a remote can repeat at will: rate-limited by
// `kind`, a fixed string naming the event ("malformed-frame", "seccomp-kill").
void limited(Level level, std::string_view kind, std::string_view message);

inline void error(std::string_view message) { write(Level::kError, message); }
inline void warn(std::string_view message) { write(Level::kWarn, message); }
inline void info(std::string_view message) { write(Level::kInfo, message); }

// One line per kind with lines still counted as dropped (call before exiting).
void report_dropped();

// For tests: forget the rate-limit state.
void reset_limits_for_test();

}  // namespace nsbox::log
