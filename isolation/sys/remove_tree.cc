// Removing a tree that code in a sandbox made (files volumes, `nsbox files rm -r`,
// `nsbox rm`): it may be deep, wide, read-only, and changing while we remove it.
//
// The walk is iterative and bounded: host memory is the current path (its names, once)
// plus one directory block, whatever the depth (a recursive walk kept a path string and a
// DIR stream per level: 2,000 levels of 255-byte names took 574 MB and 4,000 fds). At most
// kOpenLevels directory fds are open; a level whose fd was let go is opened again from
// the top by name, each step with O_NOFOLLOW and on the same device. Paths for messages
// are built only for a message. A directory left unreadable (chmod 0) is opened with
// O_PATH, made 0700 through that handle, and reopened: removal must always win.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "isolation/sys/files.h"
#include "isolation/sys/syscall.h"

namespace nsbox::files {
namespace {

constexpr size_t kOpenLevels = 64;
constexpr size_t kDirBuffer = 32u << 10;

struct linux_dirent64 {
  ino64_t d_ino;
  off64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

// Opens `name` in `dir` for reading, even when the sandbox left it unreadable: an O_PATH
// handle needs no permission, and chmod through /proc/self/fd/N changes the inode that
// handle holds, never what the name may point at by then. Errors say the call; the
// caller adds the path.
Result<UniqueFd> open_for_removal(int dir, const char* name) {
  constexpr int kFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  UniqueFd fd(::openat(dir, name, kFlags));
  if (fd) return fd;
  if (errno != EACCES) return fail(sys_error("open"));
  UniqueFd handle(::openat(dir, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!handle) return fail(sys_error("open (O_PATH)"));
  std::string via = "/proc/self/fd/" + std::to_string(handle.get());
  if (::chmod(via.c_str(), 0700) != 0) return fail(sys_error("chmod 0700"));
  UniqueFd reopened(::open(via.c_str(), kFlags & ~O_NOFOLLOW));
  if (!reopened) return fail(sys_error("open after chmod"));
  return reopened;
}

class TreeRemover {
 public:
  TreeRemover(int top, std::string shown, dev_t dev) : top_(top), shown_(std::move(shown)), dev_(dev) {}

  Result<void> run() {
    std::vector<char> buffer(kDirBuffer);
    for (;;) {
      int dir = NSBOX_TRY(current());
      // One block of entries: files go at once; the first directory is entered, and
      // the scan of this one starts over when we are back (what is gone is not seen).
      if (::lseek(dir, 0, SEEK_SET) < 0) return fail(sys_error("seek " + shown()));
      bool entered = false, empty = true;
      for (;;) {
        long n = sys::retry_eintr([&] { return ::syscall(SYS_getdents64, dir, buffer.data(), buffer.size()); });
        if (n < 0) return fail(sys_error("read directory " + shown()));
        if (n == 0) break;
        for (long off = 0; off < n && !entered;) {
          auto* e = reinterpret_cast<linux_dirent64*>(buffer.data() + off);
          off += e->d_reclen;
          if (!std::strcmp(e->d_name, ".") || !std::strcmp(e->d_name, "..")) continue;
          empty = false;
          entered = NSBOX_TRY(remove_or_enter(dir, e->d_name));
        }
        if (entered) break;
      }
      if (entered || !empty) continue;  // a new level, or a second look at this one
      if (names_.empty()) return {};
      NSBOX_CHECK(leave_and_remove_current());
    }
  }

 private:
  // Removes a non-directory; opens a directory as the new current level (true).
  Result<bool> remove_or_enter(int dir, const char* name) {
    struct stat st{};
    if (::fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) return false;  // gone meanwhile
      return fail(sys_error("stat " + shown(name)));
    }
    if (!S_ISDIR(st.st_mode)) {
      if (::unlinkat(dir, name, 0) != 0 && errno != ENOENT) return fail(sys_error("unlink " + shown(name)));
      return false;
    }
    if (st.st_dev != dev_)
      return fail(make_error(ErrorCode::kBusy, "refusing to remove " + shown(name) + ": it is a mount point"));
    auto sub = open_for_removal(dir, name);
    if (!sub) return fail(std::move(sub.error()).context(shown(name)));
    names_.emplace_back(name);
    fds_.push_back(std::move(*sub));
    // Let the oldest open level go: it is opened again by name when we are back there.
    if (fds_.size() - first_open_ > kOpenLevels) fds_[first_open_++].reset();
    return true;
  }

  // The fd of the directory being emptied. Levels are let go oldest first, so the closed
  // ones are a prefix: when the current one is closed, walk down again from the top.
  Result<int> current() {
    if (names_.empty()) return top_;
    if (fds_.back()) return fds_.back().get();
    int at = top_;
    first_open_ = names_.size() > kOpenLevels ? names_.size() - kOpenLevels : 0;
    UniqueFd walking;
    for (size_t i = 0; i < names_.size(); ++i) {
      auto opened = open_for_removal(at, names_[i].c_str());
      if (!opened) return fail(std::move(opened.error()).context(shown()));
      UniqueFd next = std::move(*opened);
      struct stat st{};
      if (::fstat(next.get(), &st) != 0 || st.st_dev != dev_)
        return fail(make_error(ErrorCode::kBusy, "refusing to remove " + shown() + ": it moved onto another mount"));
      if (i >= first_open_) {
        fds_[i] = std::move(next);
        at = fds_[i].get();
      } else {
        walking = std::move(next);
        at = walking.get();
      }
    }
    return at;
  }

  Result<void> leave_and_remove_current() {
    std::string name = std::move(names_.back());
    names_.pop_back();
    fds_.pop_back();
    if (first_open_ > fds_.size()) first_open_ = fds_.size();
    int parent = NSBOX_TRY(current());
    if (::unlinkat(parent, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
      return fail(sys_error("rmdir " + shown(name.c_str())));
    return {};
  }

  // "<shown>/a/b/<leaf>": only ever built for a message.
  std::string shown(const char* leaf = nullptr) const {
    std::string path = shown_;
    for (const auto& n : names_) path += "/" + n;
    if (leaf) path += std::string("/") + leaf;
    return path;
  }

  int top_;
  std::string shown_;
  dev_t dev_;
  std::vector<std::string> names_;  // from the top to the current level
  std::vector<UniqueFd> fds_;       // one per level; those before first_open_ are closed
  size_t first_open_ = 0;
};

}  // namespace

Result<void> remove_tree(const std::string& path) {
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return {};
    return fail(sys_error("stat " + path));
  }
  if (!S_ISDIR(st.st_mode)) {
    if (::unlink(path.c_str()) != 0) return fail(sys_error("unlink " + path));
    return {};
  }
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return fail(sys_error("open " + path));
  NSBOX_CHECK(TreeRemover(fd.get(), path, st.st_dev).run());
  if (::rmdir(path.c_str()) != 0) return fail(sys_error("rmdir " + path));
  return {};
}

Result<void> remove_tree_at(int dirfd, const std::string& name, const std::string& shown) {
  struct stat st{};
  if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return fail(sys_error("stat " + shown));
  if (!S_ISDIR(st.st_mode)) {
    if (::unlinkat(dirfd, name.c_str(), 0) != 0) return fail(sys_error("unlink " + shown));
    return {};
  }
  auto opened = open_for_removal(dirfd, name.c_str());
  if (!opened) return fail(std::move(opened.error()).context(shown));
  UniqueFd fd = std::move(*opened);
  struct stat again{};
  if (::fstat(fd.get(), &again) != 0 || again.st_ino != st.st_ino || again.st_dev != st.st_dev)
    return fail(make_error(ErrorCode::kBusy, "refusing to remove " + shown + ": it was replaced while being removed"));
  NSBOX_CHECK(TreeRemover(fd.get(), shown, st.st_dev).run());
  if (::unlinkat(dirfd, name.c_str(), AT_REMOVEDIR) != 0) return fail(sys_error("rmdir " + shown));
  return {};
}

}  // namespace nsbox::files
