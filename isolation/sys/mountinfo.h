// /proc/<pid>/mountinfo, parsed once, the same way everywhere (proc(5)):
//
//   36 25 0:32 / /sys/fs/cgroup/memory rw,relatime shared:14 - cgroup cgroup rw,memory
//
// The kernel writes a space, tab, newline or backslash in a path as an octal escape
// (\040, \011, \012, \134); they are decoded, so a mount point with a space is found.
#pragma once

#include <string>
#include <vector>

#include "isolation/sys/error.h"

namespace nsbox::sys {

struct MountInfo {
  std::string root;         // the mount's root within its filesystem
  std::string mount_point;  // decoded
  std::string fs_type;
  std::string source;       // decoded
  std::string super_options;
};

std::vector<MountInfo> parse_mountinfo(const std::string& text);
// This process's mounts (its mount namespace's), read now.
Result<std::vector<MountInfo>> own_mounts();
// "a\040b" -> "a b"; anything that is not a 3-digit octal escape stays as it is.
std::string unescape_mount_field(const std::string& field);

}  // namespace nsbox::sys
