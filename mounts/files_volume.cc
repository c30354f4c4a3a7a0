#include "mounts/files_volume.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <sstream>
#include <vector>

namespace nsbox {
namespace {

constexpr uint64_t kResolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;

int openat2_beneath(int dirfd, const std::string& name, uint64_t flags, mode_t mode) {
  open_how how{};
  how.flags = flags | O_CLOEXEC;
  how.mode = (flags & O_CREAT) ? mode : 0;
  how.resolve = kResolve;
  return static_cast<int>(::syscall(SYS_openat2, dirfd, name.c_str(), &how, sizeof how));
}

Result<std::vector<std::string>> split(const std::string& relative) {
  std::vector<std::string> parts;
  std::istringstream s(relative);
  std::string part;
  while (std::getline(s, part, '/')) {
    if (part.empty() || part == ".") continue;
    if (part == "..") return fail(make_error(ErrorCode::kInvalidArgument, "path '" + relative + "' leaves the files volume"));
    parts.push_back(part);
  }
  if (parts.empty() || relative[0] == '/')
    return fail(make_error(ErrorCode::kInvalidArgument, "'" + relative + "' is not a relative path in the files volume"));
  return parts;
}

}  // namespace

Result<FilesVolume> FilesVolume::open(const std::string& host_dir, uid_t owner, gid_t group) {
  FilesVolume v;
  v.root_.reset(::open(host_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!v.root_) return fail(sys_error("open files volume " + host_dir));
  v.owner_ = owner;
  v.group_ = group;
  return v;
}

Result<UniqueFd> FilesVolume::open_dir_beneath(int dirfd, const std::string& name, bool create) {
  if (create && ::mkdirat(dirfd, name.c_str(), 0755) == 0 && ::geteuid() == 0)
    (void)::fchownat(dirfd, name.c_str(), owner_, group_, AT_SYMLINK_NOFOLLOW);
  UniqueFd fd(openat2_beneath(dirfd, name, O_RDONLY | O_DIRECTORY, 0));
  if (!fd) {
    Error e = sys_error("open " + name + " in the files volume");
    if (e.sys_errno == ELOOP || e.sys_errno == EXDEV)
      e.message = name + " in the files volume is a symlink or another mount; refused";
    return fail(std::move(e));
  }
  return fd;
}

Result<UniqueFd> FilesVolume::create_file(const std::string& relative) {
  auto parts = NSBOX_TRY(split(relative));
  UniqueFd dir(::fcntl(root_.get(), F_DUPFD_CLOEXEC, 0));
  for (size_t i = 0; i + 1 < parts.size(); ++i) dir = NSBOX_TRY(open_dir_beneath(dir.get(), parts[i], true));
  const std::string& name = parts.back();
  // Never write through an existing inode (it could be a hard link the sandbox made).
  if (::unlinkat(dir.get(), name.c_str(), 0) != 0 && errno != ENOENT) return fail(sys_error("replace " + relative + " in the files volume"));
  UniqueFd fd(openat2_beneath(dir.get(), name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0644));
  if (!fd) return fail(sys_error("create " + relative + " in the files volume"));
  if (::geteuid() == 0) (void)::fchown(fd.get(), owner_, group_);
  return fd;
}

}  // namespace nsbox
