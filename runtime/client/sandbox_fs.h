// The sandbox's own view of its files, from the host side, with the sandbox user's
// rights: any path a process in the sandbox sees (/home/user, /tmp, /mnt/files, bucket
// mounts; the read-only system for reading). For the HTTP API's `fs` endpoints (the
// Agents SDK's Filesystem capability) and for a create's manifest entries.
//
// Paths resolve inside the sandbox's root: openat2(RESOLVE_IN_ROOT) from
// /proc/<init>/root, whose mounts are the sandbox's. No symlink is followed anywhere in a
// path (a link made inside that points at /etc is refused, not resolved), nor a magic
// link; `..` is refused before any lookup. /proc, /sys and /dev are not files and are
// refused. Every call runs with the calling thread's fs ids set to the sandbox user's
// host ids (setfsuid is per thread and drops root's right to override permissions): what
// the sandbox user may not read or write, neither may a caller here, and what is made
// belongs to the user.
//
// Rootless, an account other than the sandbox user has a subordinate host id, which this
// process may not take (setfsuid needs CAP_SETUID on the host); in the sandbox's user
// namespace, which maps it, a process of the invoking user may. So each call for such an
// account runs in a child (isolation/sys/forked_call.h) that joins that namespace,
// becomes the account (ids, no supplementary group) and drops every capability before it
// does what this thread would have done.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>

#include "isolation/sys/error.h"
#include "isolation/sys/files.h"
#include "isolation/sys/unique_fd.h"
#include "runtime/core/command.h"

namespace nsbox {

class SandboxFs {
 public:
  // `root` is the sandbox's root directory (an fd on /proc/<init>/root); `uid`/`gid`
  // the host ids of the account it acts as; `workspace` its workspace root.
  // `account`: whose rights these are, as a refusal names it.
  SandboxFs(UniqueFd root, uid_t uid, gid_t gid, std::string workspace = kDefaultWorkspaceRoot,
            std::string account = "the sandbox user")
      : root_(std::move(root)), uid_(uid), gid_(gid), workspace_(std::move(workspace)), account_(std::move(account)) {}
  // Rootless, for an account with a subordinate id: `userns` is the sandbox's user
  // namespace (an fd on /proc/<init>/ns/user), `uid`/`gid` the account's ids inside it.
  static SandboxFs in_namespace(UniqueFd root, UniqueFd userns, uid_t uid, gid_t gid, std::string workspace, std::string account) {
    SandboxFs fs(std::move(root), uid, gid, std::move(workspace), std::move(account));
    fs.userns_ = std::move(userns);
    return fs;
  }

  // "/tmp/x" as it is; "notes/a.md" under `workspace`. Refuses `..`, empty paths, NUL
  // bytes and /proc, /sys, /dev. The absolute, normalised path.
  static Result<std::string> normalize(const std::string& path, const std::string& workspace = kDefaultWorkspaceRoot);
  // normalize() under this sandbox's workspace root.
  Result<std::string> path_of(const std::string& path) const { return normalize(path, workspace_); }
  const std::string& workspace() const { return workspace_; }

  Result<UniqueFd> open_read(const std::string& path, struct stat* st) const;
  // Writes `source` to `path` whole or not at all (a temporary file beside it, renamed
  // into place), parents made as needed; refused past `max_bytes`. A regular file read
  // from its start is copied with its holes (its size counts against `max_bytes`).
  // `before_commit` as for FilesVolume::upload. Returns the bytes written.
  Result<uint64_t> write(const std::string& path, int source, uint64_t max_bytes, mode_t mode,
                         const std::function<Result<void>()>& before_commit = {}) const;
  Result<uint64_t> write_bytes(const std::string& path, std::string_view bytes, mode_t mode) const;
  Result<files::DirPage> list(const std::string& path, size_t limit, const std::string& cursor) const;
  Result<void> make_dir(const std::string& path, bool parents, mode_t mode = 0755) const;
  // A missing path is not an error when `recursive` (as `rm -rf`).
  Result<void> remove(const std::string& path, bool recursive) const;
  Result<struct stat> stat(const std::string& path) const;

 private:
  Result<UniqueFd> open_at(const std::string& path, uint64_t flags, mode_t mode = 0) const;
  Result<UniqueFd> open_parent(const std::string& path, bool create, std::string& name) const;
  // True when a call must go to a child that joins `userns_` (not in such a child yet);
  // in_child then makes the same call there and brings back its answer.
  bool forwards() const;
  // `path` names the call in its errors; `source` (-1: none) is an fd the call reads, and
  // `before_commit` runs in this process when the child is about to commit a write.
  template <class T>
  Result<T> in_child(const std::string& path, const std::function<Result<T>()>& call, int source = -1,
                     const std::function<Result<void>()>& before_commit = {}) const;
  Result<void> become_account_in_child() const;
  UniqueFd root_;
  UniqueFd userns_;  // -1: this thread acts (as root with setfsuid, or as the sandbox user itself)
  uid_t uid_;
  gid_t gid_;
  std::string workspace_;
  std::string account_;
};

}  // namespace nsbox
