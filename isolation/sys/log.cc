#include "isolation/sys/log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <mutex>

#include "isolation/sys/syscall.h"

namespace nsbox::log {
namespace {

// A message longer than this is cut: a remote's error body or a sandbox's bytes must not
// make one line a megabyte.
constexpr size_t kMaxMessageBytes = 2048;

struct KindBudget {
  double tokens = kBurstLines;
  std::chrono::steady_clock::time_point refilled = std::chrono::steady_clock::now();
  uint64_t dropped = 0;
};

struct State {
  std::mutex mutex;
  std::string program = "nsbox";
  std::string path;       // set by open_file: the file that rotates
  uint64_t written = 0;   // bytes in the current file
  std::map<std::string, KindBudget, std::less<>> kinds;
};

State& state() {
  static State s;
  return s;
}

const char* level_name(Level level) {
  switch (level) {
    case Level::kError: return "error";
    case Level::kWarn: return "warn";
    case Level::kInfo: return "info";
  }
  return "info";
}

std::string timestamp() {
  auto now = std::chrono::system_clock::now();
  std::time_t secs = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

// Control bytes (a newline forging a second line, an escape sequence for the terminal
// that shows the log) are written as \xNN.
void append_clean(std::string& line, std::string_view message) {
  static const char kHex[] = "0123456789abcdef";
  for (char c : message.substr(0, kMaxMessageBytes)) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      line += "\\x";
      line += kHex[u >> 4];
      line += kHex[u & 15];
    } else {
      line += c;
    }
  }
  if (message.size() > kMaxMessageBytes) line += " [cut at 2 KiB]";
}

// With the mutex held.
void rotate_if_full(State& s, size_t next) {
  if (s.path.empty() || s.written + next <= kMaxFileBytes) return;
  std::string old = s.path + ".1";
  int fd = -1;
  if (::rename(s.path.c_str(), old.c_str()) == 0)
    fd = ::open(s.path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd >= 0) {
    ::dup2(fd, STDERR_FILENO);
    ::close(fd);
    s.written = 0;
  } else {
    // Could not rotate (a full disk, say): start over in place rather than grow.
    (void)!::ftruncate(STDERR_FILENO, 0);
    s.written = 0;
  }
}

void emit(State& s, Level level, std::string_view message) {
  std::string line = timestamp() + " " + s.program + " " + level_name(level) + ": ";
  append_clean(line, message);
  line += '\n';
  rotate_if_full(s, line.size());
  size_t off = 0;
  while (off < line.size()) {
    ssize_t n = sys::retry_eintr([&] { return ::write(STDERR_FILENO, line.data() + off, line.size() - off); });
    if (n <= 0) return;  // a log that cannot be written is not a reason to stop
    off += static_cast<size_t>(n);
  }
  s.written += line.size();
}

}  // namespace

void set_program(std::string_view name) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.program = std::string(name);
}

Result<void> open_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return fail(sys_error("open log " + path));
  struct stat st{};
  ::fstat(fd, &st);
  if (::dup2(fd, STDERR_FILENO) < 0) {
    int err = errno;
    ::close(fd);
    return fail(sys_error("dup2 log " + path + " to stderr", err));
  }
  ::close(fd);
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.path = path;
  s.written = static_cast<uint64_t>(st.st_size);
  return {};
}

void write(Level level, std::string_view message) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  emit(s, level, message);
}

void limited(Level level, std::string_view kind, std::string_view message) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  auto it = s.kinds.find(kind);
  if (it == s.kinds.end()) it = s.kinds.emplace(std::string(kind), KindBudget{}).first;
  KindBudget& b = it->second;
  auto now = std::chrono::steady_clock::now();
  b.tokens = std::min<double>(kBurstLines, b.tokens + std::chrono::duration<double>(now - b.refilled).count());
  b.refilled = now;
  if (b.tokens < 1) {
    ++b.dropped;
    return;
  }
  b.tokens -= 1;
  if (b.dropped > 0) {
    emit(s, level, std::string(message) + " (and " + std::to_string(b.dropped) + " more like it, not logged)");
    b.dropped = 0;
  } else {
    emit(s, level, message);
  }
}

void report_dropped() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  for (auto& [kind, b] : s.kinds)
    if (b.dropped > 0) {
      emit(s, Level::kInfo, std::to_string(b.dropped) + " more lines of kind " + kind + " were not logged");
      b.dropped = 0;
    }
}

void reset_limits_for_test() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.kinds.clear();
}

}  // namespace nsbox::log
