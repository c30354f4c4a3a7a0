#include "mounts/files_volume.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <random>
#include <sstream>

#include "isolation/sys/files.h"
#include "isolation/sys/syscall.h"
#include "mounts/hashed_copy.h"

namespace nsbox {
namespace {

constexpr uint64_t kResolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
constexpr const char* kStagingDir = ".nsbox/uploads";

int openat2_beneath(int dirfd, const std::string& name, uint64_t flags, mode_t mode) {
  open_how how{};
  how.flags = flags | O_CLOEXEC;
  how.mode = ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) ? mode : 0;
  how.resolve = kResolve;
  return static_cast<int>(sys::retry_eintr([&] { return ::syscall(SYS_openat2, dirfd, name.c_str(), &how, sizeof how); }));
}

Error path_error(const std::string& what, const std::string& relative, int err) {
  Error e = sys_error(what + " " + relative + " in the files volume", err);
  if (err == ELOOP || err == EXDEV)
    e = make_error(ErrorCode::kPermissionDenied, relative + " in the files volume goes through a symlink or another mount; refused");
  if (err == ENOSPC || err == EDQUOT)
    e = make_error(ErrorCode::kLimitExceeded, what + " " + relative + ": the files volume is full (its quota)",
                   "remove files, or create the sandbox with a larger --files-quota");
  if (err == EIO || err == EROFS)  // an image volume whose loop device could not write
    e.hint = "the disk holding the volume's image may be full or failing (see the kernel log); after a write error "
             "ext4 keeps the volume read-only until it is mounted again";
  return e;
}

std::string random_name() {
  static constexpr char kAlphabet[] = "0123456789abcdefghijklmnopqrstuvwxyz";
  std::random_device rd;
  std::string s;
  for (int i = 0; i < 12; ++i) s += kAlphabet[rd() % 36];
  return s;
}

// Staging entries are named only for the moment between linkat and rename, or, where
// O_TMPFILE is missing, for their whole upload, which holds a lock on them. One that is
// unlocked and whose inode has not changed for a quarter of an hour was left by a
// process killed at that moment. (ctime, not mtime: linkat and fchmod update it.)
void sweep_stale_staging(int staging) {
  int dup = ::fcntl(staging, F_DUPFD_CLOEXEC, 0);
  DIR* d = dup < 0 ? nullptr : ::fdopendir(dup);
  if (!d) {
    if (dup >= 0) ::close(dup);
    return;
  }
  time_t cutoff = ::time(nullptr) - 15 * 60;
  while (dirent* e = ::readdir(d)) {
    struct stat st{};
    if (e->d_name[0] == '.' || ::fstatat(staging, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || S_ISDIR(st.st_mode)) continue;
    if (st.st_ctime >= cutoff) continue;
    UniqueFd entry(openat2_beneath(staging, e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, 0));
    if (entry && ::flock(entry.get(), LOCK_EX | LOCK_NB) != 0) continue;  // an upload in progress
    ::unlinkat(staging, e->d_name, 0);
  }
  ::closedir(d);
}

std::pair<std::string, std::string> split_parent(const std::string& relative) {
  auto slash = relative.rfind('/');
  if (slash == std::string::npos) return {"", relative};
  return {relative.substr(0, slash), relative.substr(slash + 1)};
}

}  // namespace

Result<FilesVolume> FilesVolume::open(const std::string& host_dir, uid_t owner, gid_t group) {
  UniqueFd root(::open(host_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!root) return fail(sys_error("open files volume " + host_dir));
  return adopt(std::move(root), owner, group);
}

FilesVolume FilesVolume::adopt(UniqueFd root, uid_t owner, gid_t group) {
  FilesVolume v;
  v.root_ = std::move(root);
  v.owner_ = owner;
  v.group_ = group;
  return v;
}

Result<std::string> FilesVolume::normalize(const std::string& relative) {
  if (relative.empty() || relative[0] == '/')
    return fail(make_error(ErrorCode::kInvalidArgument, "'" + relative + "' is not a path relative to /mnt/files",
                           "give paths like data/sales.csv"));
  // The system calls would see the path end at a NUL: "..\0x" passes the `..` check
  // below as one plain segment, and then names the volume's parent.
  if (relative.find('\0') != std::string::npos)
    return fail(make_error(ErrorCode::kInvalidArgument, "a path with a NUL byte is not a file of /mnt/files"));
  auto clean = files::clean_lexically(relative);
  if (!clean) return fail(make_error(ErrorCode::kInvalidArgument, "path '" + relative + "' leaves the files volume"));
  return *clean;  // empty: the volume's root
}

Result<UniqueFd> FilesVolume::open_dir(const std::string& relative, bool create) {
  UniqueFd dir(::fcntl(root_.get(), F_DUPFD_CLOEXEC, 0));
  if (!dir) return fail(sys_error("dup the files volume's fd"));
  std::istringstream s(relative);
  for (std::string part; std::getline(s, part, '/');) {
    if (part.empty()) continue;
    if (create && ::mkdirat(dir.get(), part.c_str(), 0755) == 0 && ::geteuid() == 0)
      (void)::fchownat(dir.get(), part.c_str(), owner_, group_, AT_SYMLINK_NOFOLLOW);
    UniqueFd next(openat2_beneath(dir.get(), part, O_RDONLY | O_DIRECTORY, 0));
    if (!next) return fail(path_error("open directory", relative, errno));
    dir = std::move(next);
  }
  return dir;
}

Result<void> FilesVolume::make_dirs(const std::string& relative) {
  auto rel = NSBOX_TRY(normalize(relative));
  NSBOX_CHECK(open_dir(rel, true));
  return {};
}

Result<UniqueFd> FilesVolume::create_file(const std::string& relative) {
  auto rel = NSBOX_TRY(normalize(relative));
  auto [parent, name] = split_parent(rel);
  if (name.empty()) return fail(make_error(ErrorCode::kInvalidArgument, "no file name in '" + relative + "'"));
  auto dir = NSBOX_TRY(open_dir(parent, true));
  if (::unlinkat(dir.get(), name.c_str(), 0) != 0 && errno != ENOENT) return fail(path_error("replace", rel, errno));
  UniqueFd fd(openat2_beneath(dir.get(), name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0644));
  if (!fd) return fail(path_error("create", rel, errno));
  if (::geteuid() == 0) (void)::fchown(fd.get(), owner_, group_);
  return fd;
}

Result<FilesVolume::Uploaded> FilesVolume::upload(int source, const std::string& relative, uint64_t max_bytes, mode_t mode,
                                                  const std::function<Result<void>()>& before_commit) {
  auto rel = NSBOX_TRY(normalize(relative));
  auto [parent, name] = split_parent(rel);
  if (name.empty()) return fail(make_error(ErrorCode::kInvalidArgument, "no file name in '" + relative + "'"));
  auto staging = NSBOX_TRY(open_dir(kStagingDir, true));
  sweep_stale_staging(staging.get());
  // The data goes into an unnamed file (O_TMPFILE): an upload killed at any point
  // leaves nothing, the kernel frees the file with its last descriptor, and nobody else
  // can reach it while it fills. It is named in the staging directory once whole and on
  // disk, and renamed into place at once.
  std::string temp = random_name();
  UniqueFd out(openat2_beneath(staging.get(), ".", O_RDWR | O_TMPFILE, 0600));
  bool unnamed = static_cast<bool>(out);
  if (!out && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    // No O_TMPFILE on this filesystem: a named staging file, locked against the sweep,
    // which the sandbox (same uid when rootless) could reach: hashed from the buffer.
    out.reset(openat2_beneath(staging.get(), temp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW, 0600));
    if (out) (void)::flock(out.get(), LOCK_EX);
  }
  if (!out) return fail(path_error("create staging file for", rel, errno));
  auto discard = [&](Error e) {
    ::unlinkat(staging.get(), temp.c_str(), 0);  // named or not yet: either way none left
    return fail(std::move(e));
  };

  auto copied = hashed_copy(source, out.get(), unnamed ? DestAccess::kPrivate : DestAccess::kShared, max_bytes, {
      .what = "the upload of " + rel,
      .read = [&](int err) { return sys_error("read the upload of " + rel, err); },
      .write = [&](int err) { return path_error("write", rel, err); },
      .too_large = [&] {
        return make_error(ErrorCode::kLimitExceeded, "upload of " + rel + " is larger than the limit of " +
                                                         std::to_string(max_bytes >> 20) + " MiB",
                          "raise it with --max-size, or split the file");
      }});
  if (!copied) return discard(copied.error());
  if (before_commit)
    if (auto ok = before_commit(); !ok) return discard(ok.error());
  if (::geteuid() == 0) (void)::fchown(out.get(), owner_, group_);
  (void)::fchmod(out.get(), (mode & 0111) ? 0755 : 0644);
  if (unnamed && ::linkat(out.get(), "", staging.get(), temp.c_str(), AT_EMPTY_PATH) != 0) {
    // AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; the /proc link does the same without it.
    std::string self = "/proc/self/fd/" + std::to_string(out.get());
    if (::linkat(AT_FDCWD, self.c_str(), staging.get(), temp.c_str(), AT_SYMLINK_FOLLOW) != 0)
      return fail(path_error("name the upload of", rel, errno));
  }
  // What is about to be renamed into place must be the file written and hashed: a named
  // staging file could have been replaced meanwhile.
  struct stat written{}, named{};
  if (::fstat(out.get(), &written) != 0 || ::fstatat(staging.get(), temp.c_str(), &named, AT_SYMLINK_NOFOLLOW) != 0 ||
      written.st_ino != named.st_ino || written.st_dev != named.st_dev)
    return discard(make_error(ErrorCode::kPermissionDenied, "the staging file of " + rel + " was replaced during the upload; refused"));
  auto dir = open_dir(parent, true);
  if (!dir) return discard(dir.error());
  // The rename replaces whatever is at the name (a file, or a symlink the sandbox put
  // there: replaced, not followed); a directory there refuses it.
  if (::renameat(staging.get(), temp.c_str(), dir->get(), name.c_str()) != 0) {
    int err = errno;
    if (err == EISDIR || err == ENOTEMPTY || err == EEXIST)
      return discard(make_error(ErrorCode::kAlreadyExists, rel + " is a directory in the files volume"));
    return discard(path_error("place", rel, err));
  }
  ::fsync(dir->get());
  return Uploaded{rel, copied->bytes, std::move(copied->sha256)};
}

Result<files::DirPage> FilesVolume::list(const std::string& relative_dir, size_t limit, const std::string& cursor) {
  auto rel = NSBOX_TRY(normalize(relative_dir.empty() ? "." : relative_dir));
  auto dir = NSBOX_TRY(open_dir(rel, false));
  return files::list_page(dir.get(), limit, cursor, rel.empty() ? "/mnt/files" : rel);
}

Result<UniqueFd> FilesVolume::open_file(const std::string& relative, struct stat* st) {
  auto rel = NSBOX_TRY(normalize(relative));
  if (rel.empty()) return fail(make_error(ErrorCode::kInvalidArgument, "no file name"));
  // O_NONBLOCK: a FIFO the sandbox put there must not hang the open; cleared once the
  // file is known to be a regular one.
  UniqueFd fd(openat2_beneath(root_.get(), rel, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, 0));
  if (!fd) {
    if (errno == ENOENT) return fail(make_error(ErrorCode::kNotFound, "no file " + rel + " in the files volume"));
    return fail(path_error("open", rel, errno));
  }
  if (::fstat(fd.get(), st) != 0) return fail(sys_error("stat " + rel));
  if (!S_ISREG(st->st_mode)) return fail(make_error(ErrorCode::kInvalidArgument, rel + " is not a regular file"));
  (void)::fcntl(fd.get(), F_SETFL, O_RDONLY);
  return fd;
}

Result<void> FilesVolume::remove(const std::string& relative, bool recursive) {
  auto rel = NSBOX_TRY(normalize(relative));
  if (rel.empty()) return fail(make_error(ErrorCode::kInvalidArgument, "refusing to remove the whole files volume"));
  auto [parent, name] = split_parent(rel);
  auto dir = NSBOX_TRY(open_dir(parent, false));
  struct stat st{};
  if (::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return fail(make_error(ErrorCode::kNotFound, "no " + rel + " in the files volume"));
    return fail(sys_error("stat " + rel));
  }
  if (!S_ISDIR(st.st_mode)) {
    if (::unlinkat(dir.get(), name.c_str(), 0) != 0) return fail(sys_error("remove " + rel));
    return {};
  }
  if (!recursive && ::unlinkat(dir.get(), name.c_str(), AT_REMOVEDIR) != 0) {
    if (errno == ENOTEMPTY || errno == EEXIST)
      return fail(make_error(ErrorCode::kInvalidArgument, rel + " is a directory that is not empty", "remove it with -r"));
    return fail(sys_error("remove " + rel));
  }
  if (recursive) return files::remove_tree_at(dir.get(), name, rel);
  return {};
}

Result<FilesVolume::Usage> FilesVolume::usage() const {
  struct statvfs s{};
  if (::fstatvfs(root_.get(), &s) != 0) return fail(sys_error("statvfs of the files volume"));
  return Usage{static_cast<uint64_t>(s.f_blocks) * s.f_frsize, static_cast<uint64_t>(s.f_bavail) * s.f_frsize};
}

}  // namespace nsbox
