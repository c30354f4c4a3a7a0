#include "mounts/bucket/inode_table.h"

namespace nsbox::bucket {

InodeTable::InodeTable() {
  Node root;
  root.is_dir = true;
  root.nlookup = 1;  // the kernel never forgets the root
  nodes_[FUSE_ROOT_ID] = root;
  by_path_[""] = FUSE_ROOT_ID;
}

fuse_ino_t InodeTable::remember(const Node& node) {
  std::lock_guard lock(mutex_);
  if (auto it = by_path_.find(node.path); it != by_path_.end()) {
    Node& known = nodes_[it->second];
    uint64_t count = known.nlookup;
    known = node;
    known.nlookup = count + 1;
    return it->second;
  }
  fuse_ino_t ino = next_++;
  Node fresh = node;
  fresh.nlookup = 1;
  nodes_[ino] = std::move(fresh);
  by_path_[node.path] = ino;
  return ino;
}

std::optional<Node> InodeTable::get(fuse_ino_t ino) {
  std::lock_guard lock(mutex_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end()) return std::nullopt;
  return it->second;
}

std::optional<fuse_ino_t> InodeTable::find(const std::string& path) {
  std::lock_guard lock(mutex_);
  auto it = by_path_.find(path);
  if (it == by_path_.end()) return std::nullopt;
  return it->second;
}

void InodeTable::update(fuse_ino_t ino, const Node& node) {
  std::lock_guard lock(mutex_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end()) return;
  uint64_t count = it->second.nlookup;
  it->second = node;
  it->second.nlookup = count;
}

void InodeTable::forget(fuse_ino_t ino, uint64_t count) {
  std::lock_guard lock(mutex_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end() || ino == FUSE_ROOT_ID) return;
  it->second.nlookup = it->second.nlookup > count ? it->second.nlookup - count : 0;
  if (it->second.nlookup > 0) return;
  if (auto p = by_path_.find(it->second.path); p != by_path_.end() && p->second == ino) by_path_.erase(p);
  nodes_.erase(it);
}

void InodeTable::drop_path(const std::string& path) {
  std::lock_guard lock(mutex_);
  by_path_.erase(path);
}

void InodeTable::cache_listing(const std::string& dir, std::map<std::string, ObjectEntry> entries) {
  std::lock_guard lock(mutex_);
  listings_[dir] = {Clock::now(), std::move(entries)};
}

std::optional<std::optional<ObjectEntry>> InodeTable::cached_entry(const std::string& dir, const std::string& name) {
  std::lock_guard lock(mutex_);
  auto it = listings_.find(dir);
  if (it == listings_.end() || Clock::now() - it->second.read_at > kListingTtl) return std::nullopt;
  auto e = it->second.entries.find(name);
  if (e == it->second.entries.end()) return std::optional<ObjectEntry>();
  return std::optional<ObjectEntry>(e->second);
}

void InodeTable::invalidate_listing(const std::string& dir) {
  std::lock_guard lock(mutex_);
  listings_.erase(dir);
}

}  // namespace nsbox::bucket
