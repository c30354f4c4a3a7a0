// A sandbox's files volume (/mnt/files), as the host side reads and writes it: the files
// API (upload, list, download, remove) and the supervisor's output files.
//
// Everything the sandbox can write is hostile to a host-side path operation: a symlink
// made inside could point the host (root) at /etc. So every path is resolved beneath the
// volume's root fd with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
// RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV): `..`, absolute paths and symlinks anywhere in
// the path are refused; a file is opened once and then read through its fd, so swapping
// the path afterwards changes nothing. Files are created fresh and renamed into place,
// never written through an existing inode (it could be a hard link the sandbox made), and
// what the host creates belongs to the sandbox user.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "isolation/sys/error.h"
#include "isolation/sys/files.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox {

class FilesVolume {
 public:
  static constexpr const char* kInsidePath = "/mnt/files";

  static Result<FilesVolume> open(const std::string& host_dir, uid_t owner, gid_t group);
  static FilesVolume adopt(UniqueFd root, uid_t owner, gid_t group);

  static std::string inside_path(const std::string& relative) { return std::string(kInsidePath) + "/" + relative; }
  // "a/b.txt": refuses absolute paths, `..`, empty; `.` components are dropped.
  static Result<std::string> normalize(const std::string& relative);

  // A new, empty regular file at `relative`, parents made as needed.
  Result<UniqueFd> create_file(const std::string& relative);

  struct Uploaded {
    std::string relative;
    uint64_t size = 0;
    std::string sha256;
  };
  // Copies `source` to `relative`, atomically: readers see the old file or the whole new
  // one, never a part (a staging file in .nsbox/uploads/, fsync, rename). `mode`'s
  // executable bits are kept. Refused past `max_bytes`, and ENOSPC past the quota.
  // `before_commit`, when given, is asked once every byte is in: an error from it (the
  // source ended early: a client went away) discards the upload.
  Result<Uploaded> upload(int source, const std::string& relative, uint64_t max_bytes, mode_t mode,
                          const std::function<Result<void>()>& before_commit = {});
  Result<void> make_dirs(const std::string& relative);

  // Entries of a directory by name; a cursor names where the previous page stopped, so it
  // stays valid while files are added or removed.
  Result<files::DirPage> list(const std::string& relative_dir, size_t limit, const std::string& cursor);

  // A regular file, opened for reading (its size in `st`).
  Result<UniqueFd> open_file(const std::string& relative, struct stat* st);
  Result<void> remove(const std::string& relative, bool recursive);

  struct Usage {
    uint64_t total_bytes = 0;
    uint64_t free_bytes = 0;
  };
  Result<Usage> usage() const;

 private:
  Result<UniqueFd> open_dir(const std::string& relative, bool create);
  UniqueFd root_;
  uid_t owner_ = 0;
  gid_t group_ = 0;
};

}  // namespace nsbox
