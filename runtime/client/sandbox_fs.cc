#include "runtime/client/sandbox_fs.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/openat2.h>
#include <sched.h>
#include <sys/fsuid.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <random>
#include <vector>

#include "isolation/capabilities.h"
#include "isolation/sys/forked_call.h"
#include "runtime/client/sandbox_fs_answers.h"
#include "isolation/sys/syscall.h"

namespace nsbox {
namespace {

// The thread's fs ids are an account's host ids while it lives. setfsuid and setfsgid are
// per thread (glibc does not broadcast them), and a non-zero fsuid clears the
// filesystem capabilities (DAC override, fowner, chown) from the thread's effective set,
// so permission checks are exactly the account's. setfsuid reports no failure (an id this
// process's namespace does not map leaves the old one): ok() reads both back, and every
// call fails closed on it.
class AsAccount {
 public:
  AsAccount(uid_t uid, gid_t gid) : uid_(uid), gid_(gid) {
    old_gid_ = static_cast<gid_t>(::setfsgid(gid));
    old_uid_ = static_cast<uid_t>(::setfsuid(uid));
  }
  ~AsAccount() {
    ::setfsuid(old_uid_);
    ::setfsgid(old_gid_);
  }
  AsAccount(const AsAccount&) = delete;
  AsAccount& operator=(const AsAccount&) = delete;

  Result<void> ok() const {
    if (static_cast<uid_t>(::setfsuid(static_cast<uid_t>(-1))) != uid_ || static_cast<gid_t>(::setfsgid(static_cast<gid_t>(-1))) != gid_)
      return fail(make_error(ErrorCode::kInternal, "could not act as host id " + std::to_string(uid_) + ":" + std::to_string(gid_) +
                                                       " (setfsuid): this process's user namespace does not map it"));
    return {};
  }

 private:
  uid_t uid_, old_uid_;
  gid_t gid_, old_gid_;
};

Error path_error(const std::string& who, const std::string& what, const std::string& path, int err) {
  switch (err) {
    case ENOENT: return make_error(ErrorCode::kNotFound, "no " + path + " in the sandbox");
    case ELOOP: case EXDEV:
      return make_error(ErrorCode::kPermissionDenied, path + " goes through a symlink; refused (symlinks are not followed)");
    case EACCES: case EPERM:
      return make_error(ErrorCode::kPermissionDenied, what + " " + path + ": not permitted to " + who);
    case EROFS: return make_error(ErrorCode::kPermissionDenied, what + " " + path + ": it is read-only in the sandbox");
    case ENOSPC: case EDQUOT:
      return make_error(ErrorCode::kLimitExceeded, what + " " + path + ": no space left (the disk or its quota is full)");
    case EEXIST: return make_error(ErrorCode::kAlreadyExists, path + " exists in the sandbox");
    case ENOTDIR: return make_error(ErrorCode::kInvalidArgument, "a part of " + path + " is not a directory");
    case EISDIR: return make_error(ErrorCode::kInvalidArgument, path + " is a directory");
    case ENOTEMPTY: return make_error(ErrorCode::kInvalidArgument, path + " is a directory that is not empty", "remove it recursively");
    default: return sys_error(what + " " + path + " in the sandbox", err);
  }
}

std::pair<std::string, std::string> split(const std::string& path) {
  auto slash = path.rfind('/');
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

std::string temp_name() {
  std::random_device rd;
  return ".nsbox-write-" + std::to_string(rd()) + std::to_string(rd());
}

}  // namespace

bool SandboxFs::forwards() const { return userns_ && !sys::in_called_child(); }

Result<void> SandboxFs::become_account_in_child() const {
  if (::setns(userns_.get(), CLONE_NEWUSER) != 0) return fail(sys_error("join the sandbox's user namespace (setns)"));
  // Joined, this process holds every capability there, and a change between ids that are
  // not 0 there keeps them: they are dropped by hand once the ids are the account's.
  if (::setgroups(0, nullptr) != 0) return fail(sys_error("setgroups(0)"));
  if (::setresgid(gid_, gid_, gid_) != 0) return fail(sys_error("setresgid(" + std::to_string(gid_) + ")"));
  if (::setresuid(uid_, uid_, uid_) != 0) return fail(sys_error("setresuid(" + std::to_string(uid_) + ")"));
  NSBOX_CHECK(capabilities::drop_all_in_child());
  return sys::rearm_parent_death();  // the id change cleared it
}

template <class T>
Result<T> SandboxFs::in_child(const std::string& path, const std::function<Result<T>()>& call, int source,
                              const std::function<Result<void>()>& before_commit) const {
  // A listing of the largest page, 255-byte names: ~30 MB.
  constexpr size_t kMaxAnswer = 64 << 20;
  sys::ChildCall child;
  child.what = "act as " + account_ + " on " + path.substr(0, 256);
  child.keep_fds = {root_.get(), userns_.get()};
  if (source >= 0) child.keep_fds.push_back(source);
  child.max_bytes = kMaxAnswer;
  child.on_ask = before_commit;
  child.work = [&]() -> Result<sys::ChildAnswer> {
    NSBOX_CHECK_CTX(become_account_in_child(), "act as " + account_);
    auto done = call();
    if (!done) return fail(std::move(done.error()));
    if constexpr (std::is_void_v<T>) return fs_answers::pack(std::move(done));
    else return fs_answers::pack(std::move(*done));
  };
  return fs_answers::unpack<T>(NSBOX_TRY(sys::call_in_child(child)));
}

Result<std::string> SandboxFs::normalize(const std::string& path, const std::string& workspace) {
  if (path.empty()) return fail(make_error(ErrorCode::kInvalidArgument, "an empty path"));
  if (path.find('\0') != std::string::npos) return fail(make_error(ErrorCode::kInvalidArgument, "a path with a NUL byte"));
  auto clean = files::clean_lexically(path.front() == '/' ? path : workspace + "/" + path);
  if (!clean) return fail(make_error(ErrorCode::kInvalidArgument, "path must not escape root: " + path));
  std::string out = "/" + *clean;
  for (const char* place : {"/proc", "/sys", "/dev"})
    if (out == place || out.starts_with(std::string(place) + "/"))
      return fail(make_error(ErrorCode::kPermissionDenied, out + " is not a file of the sandbox (" + place + " is refused)"));
  return out;
}

Result<UniqueFd> SandboxFs::open_at(const std::string& path, uint64_t flags, mode_t mode) const {
  open_how how{};
  how.flags = flags | O_CLOEXEC;
  how.mode = (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? mode : 0;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  UniqueFd fd(static_cast<int>(sys::retry_eintr([&] { return ::syscall(SYS_openat2, root_.get(), path.c_str(), &how, sizeof how); })));
  if (!fd) return fail(path_error(account_, "open", path, errno));
  return fd;
}

Result<UniqueFd> SandboxFs::open_parent(const std::string& path, bool create, std::string& name) const {
  if (path == "/") return fail(make_error(ErrorCode::kInvalidArgument, "the sandbox's root is not a file"));
  auto [parent, leaf] = split(path);
  name = leaf;
  if (create) NSBOX_CHECK(make_dir(parent, true));
  AsAccount as(uid_, gid_);
  NSBOX_CHECK(as.ok());
  return open_at(parent, O_RDONLY | O_DIRECTORY);
}

Result<UniqueFd> SandboxFs::open_read(const std::string& path, struct stat* st) const {
  if (forwards()) {
    auto fd = NSBOX_TRY(in_child<UniqueFd>(path, [&] { return open_read(path, st); }));
    if (::fstat(fd.get(), st) != 0) return fail(sys_error("stat " + path));
    return fd;
  }
  std::string p = NSBOX_TRY(path_of(path));
  AsAccount as(uid_, gid_);
  NSBOX_CHECK(as.ok());
  // O_NONBLOCK: a FIFO must not hang the open; cleared once the file is a regular one.
  auto fd = NSBOX_TRY(open_at(p, O_RDONLY | O_NOFOLLOW | O_NONBLOCK));
  if (::fstat(fd.get(), st) != 0) return fail(sys_error("stat " + p));
  if (!S_ISREG(st->st_mode)) return fail(make_error(ErrorCode::kInvalidArgument, p + " is not a regular file"));
  (void)::fcntl(fd.get(), F_SETFL, O_RDONLY);
  return fd;
}

Result<struct stat> SandboxFs::stat(const std::string& path) const {
  if (forwards()) return in_child<struct stat>(path, [&] { return stat(path); });
  std::string p = NSBOX_TRY(path_of(path));
  AsAccount as(uid_, gid_);
  NSBOX_CHECK(as.ok());
  auto fd = NSBOX_TRY(open_at(p, O_PATH | O_NOFOLLOW));
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) return fail(sys_error("stat " + p));
  return st;
}

Result<uint64_t> SandboxFs::write(const std::string& path, int source, uint64_t max_bytes, mode_t mode,
                                  const std::function<Result<void>()>& before_commit) const {
  // The child asks this process before it commits: before_commit reads what this
  // process's other threads know (an HTTP body's end), which the child's copy would not.
  if (forwards())
    return in_child<uint64_t>(
        path, [&] { return write(path, source, max_bytes, mode, before_commit ? sys::ask_caller : std::function<Result<void>()>{}); },
        source, before_commit);
  std::string p = NSBOX_TRY(path_of(path));
  std::string name;
  auto dir = NSBOX_TRY(open_parent(p, true, name));
  AsAccount as(uid_, gid_);
  NSBOX_CHECK(as.ok());
  // An unnamed file in the target's directory (same filesystem: the rename is atomic);
  // a named one where the filesystem has no O_TMPFILE (a bucket mount).
  std::string temp = temp_name();
  UniqueFd out(::openat(dir.get(), ".", O_WRONLY | O_TMPFILE | O_CLOEXEC, mode & 07777));
  bool unnamed = static_cast<bool>(out);
  if (!out && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL))
    out.reset(::openat(dir.get(), temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode & 07777));
  if (!out) return fail(path_error(account_, "write", p, errno));
  auto discard = [&](Error e) {
    if (!unnamed) ::unlinkat(dir.get(), temp.c_str(), 0);
    return fail(std::move(e));
  };
  auto too_large = [&] {
    return make_error(ErrorCode::kLimitExceeded, "the file for " + p + " is larger than the limit of " + std::to_string(max_bytes >> 20) + " MiB");
  };
  uint64_t total = 0;
  struct stat in{};
  if (::fstat(source, &in) == 0 && S_ISREG(in.st_mode) && ::lseek(source, 0, SEEK_CUR) == 0) {
    // A whole regular file (a sandbox's file handed out by upload_local_file, a manifest's
    // local file) is copied by its runs of data, holes kept: copied dense, a sparse file
    // cost the volume, then the host's copy of it, its apparent size.
    total = static_cast<uint64_t>(in.st_size);
    if (total > max_bytes) return discard(too_large());
    if (auto copied = files::copy_sparse(source, out.get(), total, "what goes to " + p, p); !copied)
      return discard(path_error(account_, "write", p, copied.error().sys_errno));
  } else {
    std::vector<char> buf(1 << 20);
    for (;;) {
      ssize_t n = sys::retry_eintr([&] { return ::read(source, buf.data(), buf.size()); });
      if (n < 0) return discard(sys_error("read what goes to " + p));
      if (n == 0) break;
      total += static_cast<uint64_t>(n);
      if (total > max_bytes) return discard(too_large());
      if (auto w = files::write_all(out.get(), std::string_view(buf.data(), static_cast<size_t>(n)), p); !w)
        return discard(path_error(account_, "write", p, w.error().sys_errno));
    }
  }
  if (before_commit)
    if (auto ok = before_commit(); !ok) return discard(ok.error());
  (void)::fchmod(out.get(), mode & 07777);  // exactly, whatever the umask
  if (::fsync(out.get()) != 0) return discard(path_error(account_, "write", p, errno));
  if (unnamed) {
    std::string self = "/proc/self/fd/" + std::to_string(out.get());
    if (::linkat(AT_FDCWD, self.c_str(), dir.get(), temp.c_str(), AT_SYMLINK_FOLLOW) != 0)
      return fail(path_error(account_, "write", p, errno));
  }
  if (::renameat(dir.get(), temp.c_str(), dir.get(), name.c_str()) != 0) {
    int err = errno;
    ::unlinkat(dir.get(), temp.c_str(), 0);
    return fail(path_error(account_, "write", p, err));
  }
  return total;
}

Result<uint64_t> SandboxFs::write_bytes(const std::string& path, std::string_view bytes, mode_t mode) const {
  UniqueFd memory(::memfd_create("nsbox-write", MFD_CLOEXEC));
  if (!memory) return fail(sys_error("memfd_create"));
  NSBOX_CHECK(files::write_all(memory.get(), bytes, "a memfd"));
  if (::lseek(memory.get(), 0, SEEK_SET) != 0) return fail(sys_error("seek a memfd"));
  return write(path, memory.get(), bytes.size(), mode);
}

Result<files::DirPage> SandboxFs::list(const std::string& path, size_t limit, const std::string& cursor) const {
  if (forwards()) return in_child<files::DirPage>(path, [&] { return list(path, limit, cursor); });
  std::string p = NSBOX_TRY(path_of(path));
  AsAccount as(uid_, gid_);
  NSBOX_CHECK(as.ok());
  auto dir = NSBOX_TRY(open_at(p, O_RDONLY | O_DIRECTORY));
  auto page = files::list_page(dir.get(), limit, cursor, p);
  if (!page) return fail(path_error(account_, "list", p, page.error().sys_errno));
  return page;
}

Result<void> SandboxFs::make_dir(const std::string& path, bool parents, mode_t mode) const {
  if (forwards()) return in_child<void>(path, [&] { return make_dir(path, parents, mode); });
  std::string p = NSBOX_TRY(path_of(path));
  if (p == "/") return parents ? Result<void>{} : fail(path_error(account_, "make", p, EEXIST));
  AsAccount as(uid_, gid_);
  NSBOX_CHECK(as.ok());
  if (!parents) {
    auto [parent, name] = split(p);
    auto dir = NSBOX_TRY(open_at(parent, O_RDONLY | O_DIRECTORY));
    if (::mkdirat(dir.get(), name.c_str(), mode) != 0) return fail(path_error(account_, "make", p, errno));
    return {};
  }
  // Each level in turn, from the deepest one that exists.
  std::string at;
  size_t start = 1;
  while (start <= p.size()) {
    size_t end = p.find('/', start);
    if (end == std::string::npos) end = p.size();
    std::string next = at + "/" + p.substr(start, end - start);
    auto opened = open_at(next, O_RDONLY | O_DIRECTORY);
    if (!opened) {
      if (opened.error().code != ErrorCode::kNotFound) return fail(std::move(opened.error()));
      auto dir = NSBOX_TRY(open_at(at.empty() ? "/" : at, O_RDONLY | O_DIRECTORY));
      std::string name = p.substr(start, end - start);
      if (::mkdirat(dir.get(), name.c_str(), mode) != 0 && errno != EEXIST) return fail(path_error(account_, "make", next, errno));
    }
    at = next;
    start = end + 1;
  }
  return {};
}

Result<void> SandboxFs::remove(const std::string& path, bool recursive) const {
  if (forwards()) return in_child<void>(path, [&] { return remove(path, recursive); });
  std::string p = NSBOX_TRY(path_of(path));
  std::string name;
  auto dir = open_parent(p, false, name);
  if (!dir) {
    if (dir.error().code == ErrorCode::kNotFound && recursive) return {};
    return fail(std::move(dir.error()));
  }
  AsAccount as(uid_, gid_);
  NSBOX_CHECK(as.ok());
  struct stat st{};
  if (::fstatat(dir->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT && recursive) return {};
    return fail(path_error(account_, "remove", p, errno));
  }
  if (S_ISDIR(st.st_mode)) {
    if (!recursive) {
      if (::unlinkat(dir->get(), name.c_str(), AT_REMOVEDIR) != 0) return fail(path_error(account_, "remove", p, errno));
      return {};
    }
    auto removed = files::remove_tree_at(dir->get(), name, p);
    if (!removed && removed.error().sys_errno) return fail(path_error(account_, "remove", p, removed.error().sys_errno));
    return removed;
  }
  if (::unlinkat(dir->get(), name.c_str(), 0) != 0) return fail(path_error(account_, "remove", p, errno));
  return {};
}

}  // namespace nsbox
