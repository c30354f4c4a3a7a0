// A sandbox's files volume (/mnt/files), as the host side writes into it.
//
// Everything the sandbox can write is hostile to a host-side path operation: a symlink
// made inside could point the supervisor (root) at /etc. So every path is resolved
// beneath the volume's directory fd with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
// RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV), files are created fresh (an existing one is
// unlinked, never written through), and what we create belongs to the sandbox user.
// (The files API of the files-volume issue builds on this.)
#pragma once

#include <sys/types.h>

#include <string>

#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox {

class FilesVolume {
 public:
  static constexpr const char* kInsidePath = "/mnt/files";

  static Result<FilesVolume> open(const std::string& host_dir, uid_t owner, gid_t group);

  // A new, empty regular file at `relative` ("a/b/c.txt"), parents made as needed.
  Result<UniqueFd> create_file(const std::string& relative);
  static std::string inside_path(const std::string& relative) { return std::string(kInsidePath) + "/" + relative; }

 private:
  Result<UniqueFd> open_dir_beneath(int dirfd, const std::string& name, bool create);
  UniqueFd root_;
  uid_t owner_ = 0;
  gid_t group_ = 0;
};

}  // namespace nsbox
