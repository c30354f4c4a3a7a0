// Small, exact file helpers used everywhere: whole-file read/write, atomic replace,
// directory creation and removal. Every failure names the path.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox::files {

Result<std::string> read_file(const std::string& path, size_t max_bytes = 1 << 20);
// The rest of an open file, at most `max_bytes` (more is a limit error); `what` names it.
Result<std::string> read_all(int fd, size_t max_bytes, std::string_view what);
// A path's components without the empty ones and `.`, joined by '/' ("/a/./b//c/" ->
// "a/b/c"; "" when none is left), or nullopt when one of them is `..`. Lexical only: no
// lookup, so a caller that must not climb refuses `..` by name and resolves links itself.
std::optional<std::string> clean_lexically(std::string_view path);
Result<void> write_file(const std::string& path, std::string_view data);  // no O_CREAT
Result<void> write_all(int fd, std::string_view data, std::string_view what);
// Copies `in` to its end into `out` in the kernel (splice through a pipe: no trip through
// user memory), or by read/write where splice cannot (a terminal). The byte count.
Result<uint64_t> copy_stream(int in, int out, std::string_view in_name, std::string_view out_name);
// Copies the first `size` bytes of the regular file `in` to the regular file `out` and
// keeps its holes (SEEK_DATA/SEEK_HOLE): a sparse file made in a sandbox (truncate -s 1T)
// costs the host the blocks it really holds, not its apparent size.
Result<uint64_t> copy_sparse(int in, int out, uint64_t size, std::string_view in_name, std::string_view out_name);

// temp file in the same directory + fsync + rename + fsync(dir): readers see the old
// content or the new, never a mix.
// kVolatile skips the fsyncs: for files a reboot forgets by design (the run directory's
// records), where readers need only the rename's atomicity, not durability.
enum class Durability { kSynced, kVolatile };
Result<void> atomic_write(const std::string& path, std::string_view data, mode_t mode = 0600,
                          Durability durability = Durability::kSynced);

Result<void> make_dirs(const std::string& path, mode_t mode = 0755);
// Creates `path` (mode 0700) if missing, then insists it is ours alone: a directory, not a
// symlink, owned by our euid, writable by nobody else. State directories go through it,
// so that a directory someone else made in advance (in /tmp, say) is refused.
Result<void> ensure_private_dir(const std::string& path);
// Removes a tree without following symlinks and without crossing into other mounts, in
// bounded memory and fds however deep, including directories left unreadable
// (isolation/sys/remove_tree.cc).
Result<void> remove_tree(const std::string& path);
// The same for `name` in directory `dirfd` (`shown` names it in errors).
Result<void> remove_tree_at(int dirfd, const std::string& name, const std::string& shown);

Result<UniqueFd> open_dir(const std::string& path);
// `path` (a lock file, made 0600 if missing, never through a link) held with an exclusive
// flock, waiting for it, while the fd lives.
Result<UniqueFd> lock_exclusive(const std::string& path);

// One page of a directory, by name: the entries after `cursor` (a name; "" for the
// first page), at most `limit`, sorted; `next_cursor` is empty on the last page. Memory
// for the page, not the directory (a sandbox can fill one with millions of names), and
// a cursor stays valid while names come and go.
struct DirEntry {
  std::string name;
  std::string type;  // file, dir, symlink, other
  uint64_t size = 0;
  uint64_t allocated = 0;  // bytes on disk: less than size for a sparse file
  uint32_t mode = 0;       // permission bits
  int64_t mtime = 0;       // seconds since the epoch
};
struct DirPage {
  std::vector<DirEntry> entries;
  std::string next_cursor;
};
Result<DirPage> list_page(int dirfd, size_t limit, const std::string& cursor, const std::string& shown);
Result<std::vector<std::string>> list_dir(const std::string& path);
// The names in the directory `dirfd` (`shown` names it in errors).
Result<std::vector<std::string>> list_dir_at(int dirfd, const std::string& shown);

bool exists(const std::string& path);

}  // namespace nsbox::files
