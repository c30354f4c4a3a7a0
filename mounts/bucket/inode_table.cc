#include "mounts/bucket/inode_table.h"

namespace nsbox::bucket {
namespace {

// What a caller may change; the counts and marks stay the table's.
void take_facts(Node& known, const Node& from) {
  known.is_dir = from.is_dir;
  known.size = from.size;
  known.mtime = from.mtime;
  known.etag = from.etag;
  known.seen_at = from.seen_at;
  known.local = from.local;
}

}  // namespace

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
    if (known.writers == 0) take_facts(known, node);
    ++known.nlookup;
    return it->second;
  }
  fuse_ino_t ino = next_++;
  Node fresh;
  fresh.path = node.path;
  take_facts(fresh, node);
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
  if (auto it = nodes_.find(ino); it != nodes_.end()) take_facts(it->second, node);
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

void InodeTable::add_writer(fuse_ino_t ino) {
  std::lock_guard lock(mutex_);
  if (auto it = nodes_.find(ino); it != nodes_.end()) ++it->second.writers;
}

void InodeTable::remove_writer(fuse_ino_t ino) {
  std::lock_guard lock(mutex_);
  if (auto it = nodes_.find(ino); it != nodes_.end() && it->second.writers > 0) --it->second.writers;
}

void InodeTable::unlink_locked(const std::string& path) {
  auto it = by_path_.find(path);
  if (it == by_path_.end()) return;
  if (auto n = nodes_.find(it->second); n != nodes_.end()) n->second.unlinked = true;
  by_path_.erase(it);
}

void InodeTable::unlink(const std::string& path) {
  std::lock_guard lock(mutex_);
  unlink_locked(path);
}

void InodeTable::rename(const std::string& from, const std::string& to) {
  std::lock_guard lock(mutex_);
  unlink_locked(to);
  auto it = by_path_.find(from);
  if (it == by_path_.end()) return;
  fuse_ino_t ino = it->second;
  by_path_.erase(it);
  by_path_[to] = ino;
  nodes_[ino].path = to;
}

std::vector<Node> InodeTable::local_children(const std::string& dir) {
  std::lock_guard lock(mutex_);
  std::vector<Node> out;
  for (const auto& [path, ino] : by_path_) {
    const Node& n = nodes_[ino];
    auto slash = path.rfind('/');
    std::string parent = slash == std::string::npos ? "" : path.substr(0, slash);
    if (n.local && !n.unlinked && parent == dir && !path.empty()) out.push_back(n);
  }
  return out;
}

void InodeTable::cache_listing(const std::string& dir, std::map<std::string, ObjectEntry> entries, Clock::time_point since) {
  std::lock_guard lock(mutex_);
  if (recent_changes_.size() == kRecentChanges && recent_changes_.front().second >= since) return;  // what changed since is lost
  for (const auto& [changed, at] : recent_changes_)
    if (changed == dir && at >= since) return;
  // Expired listings are of no use: drop them, so that walking a large tree does not keep
  // every directory it saw.
  auto now = Clock::now();
  for (auto it = listings_.begin(); it != listings_.end();) {
    bool expired = now - it->second.read_at > kListingTtl || it->first == dir;
    if (expired) cached_entries_ -= it->second.entries.size();
    it = expired ? listings_.erase(it) : std::next(it);
  }
  if (cached_entries_ + entries.size() > kCachedEntriesMax) return;
  cached_entries_ += entries.size();
  listings_[dir] = {since, std::move(entries)};
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
  if (recent_changes_.size() == kRecentChanges) recent_changes_.pop_front();
  recent_changes_.emplace_back(dir, Clock::now());
  if (auto it = listings_.find(dir); it != listings_.end()) {
    cached_entries_ -= it->second.entries.size();
    listings_.erase(it);
  }
}

}  // namespace nsbox::bucket
