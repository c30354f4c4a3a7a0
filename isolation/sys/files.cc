#include "isolation/sys/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <queue>
#include <random>
#include <vector>

#include "isolation/sys/syscall.h"

namespace nsbox::files {

std::optional<std::string> clean_lexically(std::string_view path) {
  std::string out;
  size_t at = 0;
  while (at <= path.size()) {
    size_t end = path.find('/', at);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(at, end - at);
    if (part == "..") return std::nullopt;
    if (!part.empty() && part != ".") {
      if (!out.empty()) out += '/';
      out += part;
    }
    at = end + 1;
  }
  return out;
}

Result<std::string> read_file(const std::string& path, size_t max_bytes) {
  UniqueFd fd(sys::retry_eintr([&] { return ::open(path.c_str(), O_RDONLY | O_CLOEXEC); }));
  if (!fd) return fail(sys_error("open " + path));
  return read_all(fd.get(), max_bytes, path);
}

Result<std::string> read_all(int fd, size_t max_bytes, std::string_view what) {
  std::string out;
  char buf[8192];
  for (;;) {
    ssize_t n = sys::retry_eintr([&] { return ::read(fd, buf, sizeof buf); });
    if (n < 0) return fail(sys_error("read " + std::string(what)));
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > max_bytes)
      return fail(make_error(ErrorCode::kLimitExceeded,
                             "read " + std::string(what) + ": larger than " + std::to_string(max_bytes) + " bytes"));
  }
  return out;
}

Result<void> write_all(int fd, std::string_view data, std::string_view what) {
  while (!data.empty()) {
    ssize_t n = sys::retry_eintr([&] { return ::write(fd, data.data(), data.size()); });
    if (n < 0) return fail(sys_error("write " + std::string(what)));
    data.remove_prefix(static_cast<size_t>(n));
  }
  return {};
}

namespace {

// copy_stream's way when splice cannot read `in` or write `out`; `total` already copied.
Result<uint64_t> read_write_rest(int in, int out, uint64_t total, std::string_view in_name, std::string_view out_name) {
  std::vector<char> buf(1 << 20);
  for (;;) {
    ssize_t n = sys::retry_eintr([&] { return ::read(in, buf.data(), buf.size()); });
    if (n < 0) return fail(sys_error("read " + std::string(in_name)));
    if (n == 0) return total;
    NSBOX_CHECK(write_all(out, std::string_view(buf.data(), static_cast<size_t>(n)), out_name));
    total += static_cast<uint64_t>(n);
  }
}

}  // namespace

Result<uint64_t> copy_stream(int in, int out, std::string_view in_name, std::string_view out_name) {
  constexpr size_t kChunk = 1 << 20;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return fail(sys_error("pipe2 to copy " + std::string(in_name)));
  UniqueFd pipe_read(fds[0]), pipe_write(fds[1]);
  (void)::fcntl(fds[1], F_SETPIPE_SZ, static_cast<int>(kChunk));  // smaller only means more calls
  uint64_t total = 0;
  for (;;) {
    ssize_t n = sys::retry_eintr([&] { return ::splice(in, nullptr, fds[1], nullptr, kChunk, SPLICE_F_MOVE); });
    if (n < 0 && errno == EINVAL && total == 0) return read_write_rest(in, out, 0, in_name, out_name);
    if (n < 0) return fail(sys_error("read " + std::string(in_name)));
    if (n == 0) return total;
    for (ssize_t left = n; left > 0;) {
      ssize_t w = sys::retry_eintr([&] { return ::splice(fds[0], nullptr, out, nullptr, static_cast<size_t>(left), SPLICE_F_MOVE); });
      if (w < 0 && errno == EINVAL && total == 0 && left == n) {
        // splice cannot write `out`: the chunk in the pipe, then the rest, by read/write.
        std::vector<char> pending(static_cast<size_t>(n));
        if (::read(fds[0], pending.data(), pending.size()) != n) return fail(sys_error("read back the copy of " + std::string(in_name)));
        NSBOX_CHECK(write_all(out, std::string_view(pending.data(), pending.size()), out_name));
        return read_write_rest(in, out, static_cast<uint64_t>(n), in_name, out_name);
      }
      if (w < 0) return fail(sys_error("write " + std::string(out_name)));
      left -= w;
    }
    total += static_cast<uint64_t>(n);
  }
}

namespace {

// [at, at + len) of `in` to the same offsets of `out`, through user memory.
Result<void> copy_range_by_hand(int in, int out, off_t at, off_t len, std::string_view in_name, std::string_view out_name) {
  std::vector<char> buf(static_cast<size_t>(std::min<off_t>(len, 1 << 20)));
  while (len > 0) {
    ssize_t n = sys::retry_eintr([&] { return ::pread(in, buf.data(), static_cast<size_t>(std::min<off_t>(len, buf.size())), at); });
    if (n < 0) return fail(sys_error("read " + std::string(in_name)));
    if (n == 0) return {};  // the file shrank meanwhile
    for (ssize_t done = 0; done < n;) {
      ssize_t w = sys::retry_eintr([&] { return ::pwrite(out, buf.data() + done, static_cast<size_t>(n - done), at + done); });
      if (w < 0) return fail(sys_error("write " + std::string(out_name)));
      done += w;
    }
    at += n;
    len -= n;
  }
  return {};
}

// The same in the kernel: splice into `pipe` and out of it, at explicit offsets. False,
// with nothing copied, when splice cannot read `in` or write `out` (then the caller
// copies by hand).
Result<bool> splice_range(int in, int out, off_t at, off_t len, const int pipe[2], std::string_view in_name,
                          std::string_view out_name) {
  constexpr size_t kChunk = 1 << 20;
  bool first = true;
  while (len > 0) {
    loff_t from = at;
    ssize_t n = sys::retry_eintr([&] { return ::splice(in, &from, pipe[1], nullptr, std::min<size_t>(kChunk, len), SPLICE_F_MOVE); });
    if (n < 0 && errno == EINVAL && first) return false;
    if (n < 0) return fail(sys_error("read " + std::string(in_name)));
    if (n == 0) return true;  // the file shrank meanwhile
    loff_t to = at;
    for (ssize_t left = n; left > 0;) {
      ssize_t w = sys::retry_eintr([&] { return ::splice(pipe[0], nullptr, out, &to, static_cast<size_t>(left), SPLICE_F_MOVE); });
      if (w < 0 && errno == EINVAL && first && left == n) {
        // splice cannot write `out`: empty the pipe; the caller copies the range by hand.
        std::vector<char> drain(static_cast<size_t>(n));
        if (::read(pipe[0], drain.data(), drain.size()) != n) return fail(sys_error("read back the copy of " + std::string(in_name)));
        return false;
      }
      if (w < 0) return fail(sys_error("write " + std::string(out_name)));
      left -= w;
    }
    first = false;
    at += n;
    len -= n;
  }
  return true;
}

}  // namespace

Result<uint64_t> copy_sparse(int in, int out, uint64_t size, std::string_view in_name, std::string_view out_name) {
  int pipe[2] = {-1, -1};
  if (::pipe2(pipe, O_CLOEXEC) != 0) return fail(sys_error("pipe2 to copy " + std::string(in_name)));
  UniqueFd pipe_read(pipe[0]), pipe_write(pipe[1]);
  (void)::fcntl(pipe[1], F_SETPIPE_SZ, 1 << 20);  // smaller only means more calls
  bool by_splice = true;
  off_t pos = 0;
  while (static_cast<uint64_t>(pos) < size) {
    off_t data = ::lseek(in, pos, SEEK_DATA);
    if (data < 0 && errno == ENXIO) break;  // only a hole is left
    if (data < 0) return fail(sys_error("find data in " + std::string(in_name)));
    off_t hole = ::lseek(in, data, SEEK_HOLE);
    if (hole < 0) return fail(sys_error("find a hole in " + std::string(in_name)));
    hole = std::min<off_t>(hole, static_cast<off_t>(size));
    if (data >= hole) break;
    if (by_splice) by_splice = NSBOX_TRY(splice_range(in, out, data, hole - data, pipe, in_name, out_name));
    if (!by_splice) NSBOX_CHECK(copy_range_by_hand(in, out, data, hole - data, in_name, out_name));
    pos = hole;
  }
  if (::ftruncate(out, static_cast<off_t>(size)) != 0) return fail(sys_error("size " + std::string(out_name)));
  return size;
}

Result<void> write_file(const std::string& path, std::string_view data) {
  UniqueFd fd(sys::retry_eintr([&] { return ::open(path.c_str(), O_WRONLY | O_CLOEXEC); }));
  if (!fd) return fail(sys_error("open " + path));
  // cgroup and proc files take one write(); a short write would be a partial value.
  ssize_t n = sys::retry_eintr([&] { return ::write(fd.get(), data.data(), data.size()); });
  if (n < 0) return fail(sys_error("write '" + std::string(data) + "' to " + path));
  if (static_cast<size_t>(n) != data.size())
    return fail(make_error(ErrorCode::kSystem, "short write to " + path));
  return {};
}

Result<void> atomic_write(const std::string& path, std::string_view data, mode_t mode, Durability durability) {
  std::string dir = ".";
  if (auto slash = path.rfind('/'); slash != std::string::npos) dir = path.substr(0, slash);
  std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                    std::to_string(std::random_device{}());
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode));
  if (!fd) return fail(sys_error("create " + tmp));
  auto cleanup_on_error = [&](Error e) {
    ::unlink(tmp.c_str());
    return fail(std::move(e));
  };
  if (auto r = write_all(fd.get(), data, tmp); !r) return cleanup_on_error(r.error());
  const bool synced = durability == Durability::kSynced;
  if (synced && ::fsync(fd.get()) != 0) return cleanup_on_error(sys_error("fsync " + tmp));
  fd.reset();
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    return cleanup_on_error(sys_error("rename " + tmp + " to " + path));
  if (!synced) return {};
  UniqueFd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd) ::fsync(dfd.get());
  return {};
}

Result<void> make_dirs(const std::string& path, mode_t mode) {
  if (path.empty()) return {};
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), mode) != 0 && errno != EEXIST)
      return fail(sys_error("mkdir " + partial));
  }
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return fail(sys_error("stat " + path));
  if (!S_ISDIR(st.st_mode))
    return fail(make_error(ErrorCode::kInvalidArgument, path + " exists and is not a directory"));
  return {};
}

Result<void> ensure_private_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    if (errno != ENOENT) return fail(sys_error("mkdir " + path));
    NSBOX_CHECK(make_dirs(path.substr(0, path.rfind('/')), 0755));
    if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) return fail(sys_error("mkdir " + path));
  }
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0) return fail(sys_error("stat " + path));
  std::string problem;
  if (S_ISLNK(st.st_mode)) problem = "it is a symlink";
  else if (!S_ISDIR(st.st_mode)) problem = "it is not a directory";
  else if (st.st_uid != ::geteuid()) problem = "it belongs to uid " + std::to_string(st.st_uid);
  else if (st.st_mode & 022) problem = "others may write to it";
  if (!problem.empty())
    return fail(make_error(ErrorCode::kPermissionDenied, "refusing to keep state in " + path + ": " + problem,
                           "remove it, or choose another place with --root DIR (or XDG_RUNTIME_DIR)"));
  return {};
}

Result<DirPage> list_page(int dirfd, size_t limit, const std::string& cursor, const std::string& shown) {
  int dup = ::fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
  DIR* d = dup < 0 ? nullptr : ::fdopendir(dup);
  if (!d) {
    if (dup >= 0) ::close(dup);
    return fail(sys_error("list " + shown));
  }
  // The limit + 1 smallest names after the cursor, in a max-heap.
  std::priority_queue<std::string> smallest;
  while (dirent* e = ::readdir(d)) {
    std::string_view n = e->d_name;
    if (n == "." || n == ".." || n <= cursor) continue;
    if (smallest.size() <= limit) {
      smallest.emplace(n);
    } else if (n < smallest.top()) {
      smallest.pop();
      smallest.emplace(n);
    }
  }
  ::closedir(d);
  std::vector<std::string> names;
  names.reserve(smallest.size());
  for (; !smallest.empty(); smallest.pop()) names.push_back(smallest.top());
  std::reverse(names.begin(), names.end());
  DirPage page;
  for (const auto& n : names) {
    if (page.entries.size() == limit) {
      page.next_cursor = page.entries.back().name;
      break;
    }
    struct stat st{};
    if (::fstatat(dirfd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone meanwhile
    std::string type = S_ISREG(st.st_mode) ? "file" : S_ISDIR(st.st_mode) ? "dir" : S_ISLNK(st.st_mode) ? "symlink" : "other";
    page.entries.push_back({n, type, static_cast<uint64_t>(st.st_size), static_cast<uint64_t>(st.st_blocks) * 512,
                            static_cast<uint32_t>(st.st_mode & 07777), static_cast<int64_t>(st.st_mtime)});
  }
  // Names that vanished meanwhile left the page short: there is still more after it.
  if (page.next_cursor.empty() && names.size() > limit)
    page.next_cursor = page.entries.empty() ? names.back() : page.entries.back().name;
  return page;
}

Result<UniqueFd> lock_exclusive(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return fail(sys_error("open the lock " + path));
  if (sys::retry_eintr([&] { return ::flock(fd.get(), LOCK_EX); }) != 0) return fail(sys_error("lock " + path));
  return fd;
}

Result<UniqueFd> open_dir(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return fail(sys_error("open directory " + path));
  return fd;
}

namespace {

std::vector<std::string> read_names(DIR* d) {
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    if (!std::strcmp(e->d_name, ".") || !std::strcmp(e->d_name, "..")) continue;
    names.emplace_back(e->d_name);
  }
  ::closedir(d);
  return names;
}

}  // namespace

Result<std::vector<std::string>> list_dir_at(int dirfd, const std::string& shown) {
  int copy = ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (copy < 0) return fail(sys_error("open " + shown));
  DIR* d = ::fdopendir(copy);
  if (!d) {
    ::close(copy);
    return fail(sys_error("opendir " + shown));
  }
  return read_names(d);
}

Result<std::vector<std::string>> list_dir(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (!d) return fail(sys_error("opendir " + path));
  return read_names(d);
}

bool exists(const std::string& path) {
  struct stat st{};
  return ::lstat(path.c_str(), &st) == 0;
}

}  // namespace nsbox::files
