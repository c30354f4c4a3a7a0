// Small, exact file helpers used everywhere: whole-file read/write, atomic replace,
// directory creation and removal. Every failure names the path.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox::files {

Result<std::string> read_file(const std::string& path, size_t max_bytes = 1 << 20);
Result<void> write_file(const std::string& path, std::string_view data);  // no O_CREAT
Result<void> write_all(int fd, std::string_view data, std::string_view what);
// Copies `in` to its end into `out` in the kernel (splice through a pipe: no trip through
// user memory), or by read/write where splice cannot (a terminal). The byte count.
Result<uint64_t> copy_stream(int in, int out, std::string_view in_name, std::string_view out_name);

// temp file in the same directory + fsync + rename + fsync(dir): readers see the old
// content or the new, never a mix.
Result<void> atomic_write(const std::string& path, std::string_view data, mode_t mode = 0600);

Result<void> make_dirs(const std::string& path, mode_t mode = 0755);
// Creates `path` (mode 0700) if missing, then insists it is ours alone: a directory, not a
// symlink, owned by our euid, writable by nobody else. State directories go through it,
// so that a directory someone else made in advance (in /tmp, say) is refused.
Result<void> ensure_private_dir(const std::string& path);
// Removes a tree without following symlinks and without crossing into other mounts.
Result<void> remove_tree(const std::string& path);
// The same for `name` in directory `dirfd` (`shown` names it in errors).
Result<void> remove_tree_at(int dirfd, const std::string& name, const std::string& shown);

Result<UniqueFd> open_dir(const std::string& path);
Result<std::vector<std::string>> list_dir(const std::string& path);

bool exists(const std::string& path);

}  // namespace nsbox::files
