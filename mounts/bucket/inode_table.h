// The inodes a bucket filesystem has handed to the kernel, and the directory listings it
// keeps for a short while so that lookups after a readdir cost no request.
//
// An inode is a path inside the mount ("" is the root, "a/b" a key below the prefix); the
// kernel holds it by number and forgets it by count (FUSE's nlookup). While a file is open
// for writing, its inode is the truth about it (size, times), not the remote: what the
// remote says of it then is not taken.
#pragma once

#include <fuse_lowlevel.h>

#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "mounts/bucket/bucket_client.h"

namespace nsbox::bucket {

using Clock = std::chrono::steady_clock;

struct Node {
  std::string path;
  bool is_dir = false;
  uint64_t size = 0;
  std::time_t mtime = 0;
  std::string etag;
  Clock::time_point seen_at;  // when the remote last confirmed it
  // A created file before its first upload: the remote does not know it, lookups must.
  bool local = false;
  // Kept by the table, whatever a caller passes in:
  uint64_t nlookup = 0;
  unsigned writers = 0;   // open handles that may upload it
  bool unlinked = false;  // removed (or renamed over) while open: its uploads are dropped
};

class InodeTable {
 public:
  InodeTable();

  // Remembers (or refreshes, unless it is open for writing) `node` and counts one lookup;
  // returns its number.
  fuse_ino_t remember(const Node& node);
  std::optional<Node> get(fuse_ino_t ino);
  std::optional<fuse_ino_t> find(const std::string& path);
  // Replaces what is known of `ino` (not its counts, nor its path).
  void update(fuse_ino_t ino, const Node& node);
  void forget(fuse_ino_t ino, uint64_t count);

  void add_writer(fuse_ino_t ino);
  void remove_writer(fuse_ino_t ino);
  // The name is gone: a later lookup makes a new inode; an open writer of the old one
  // uploads nothing.
  void unlink(const std::string& path);
  // The inode at `from` is now at `to` (whatever was at `to` is unlinked).
  void rename(const std::string& from, const std::string& to);
  // Files created in `dir` here and not uploaded yet: a listing of the remote lacks them.
  std::vector<Node> local_children(const std::string& dir);

  // Listings, whole, for kListingTtl after `since` (when their reading began); not one
  // whose directory changed here since (it may hold a name gone, or lack a new one), nor
  // one that would take the entries cached past kCachedEntriesMax: lookups ask the remote.
  void cache_listing(const std::string& dir, std::map<std::string, ObjectEntry> entries, Clock::time_point since);
  // nullopt: no fresh listing of `dir`; otherwise whether it has `name` (and what).
  std::optional<std::optional<ObjectEntry>> cached_entry(const std::string& dir, const std::string& name);
  void invalidate_listing(const std::string& dir);  // `dir` changed here

  static constexpr std::chrono::milliseconds kListingTtl{1000};
  static constexpr size_t kCachedEntriesMax = 200000;

 private:
  void unlink_locked(const std::string& path);

  std::mutex mutex_;
  fuse_ino_t next_ = FUSE_ROOT_ID + 1;
  std::unordered_map<fuse_ino_t, Node> nodes_;
  std::unordered_map<std::string, fuse_ino_t> by_path_;
  struct Listing {
    Clock::time_point read_at;
    std::map<std::string, ObjectEntry> entries;
  };
  std::unordered_map<std::string, Listing> listings_;
  size_t cached_entries_ = 0;  // in listings_
  // The last kRecentChanges directories changed here, and when: a listing begun before one
  // of its directory's, or before the oldest kept, is not cached.
  static constexpr size_t kRecentChanges = 4096;
  std::deque<std::pair<std::string, Clock::time_point>> recent_changes_;
};

}  // namespace nsbox::bucket
