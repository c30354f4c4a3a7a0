// The names of a bucket filesystem: lookups and listings (served from ListObjectsV2 /
// List Blobs with a delimiter, cached for a second), unlink, mkdir, rmdir, rename, and
// the table of operations. Open files are in bucket_files.cc.
#include "mounts/bucket/bucket_fs.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "isolation/sys/log.h"
#include "mounts/bucket/directory_stream.h"
#include "mounts/bucket/fs_common.h"

namespace nsbox::bucket::fs_ops {
namespace {

struct OpenDir {
  std::string path;
  std::mutex mutex;  // readdir calls of one handle may come on several threads
  std::unique_ptr<DirectoryStream> stream;
  bool replied = false;
};

// The listing of `dir` from the start, with what was created there and is not in the bucket
// yet (a `touch` whose upload comes at its last close) first; its first page fetched.
Result<void> list_from_start(BucketFs& fs, OpenDir& dir) {
  std::vector<ObjectEntry> local;
  for (const Node& n : fs.inodes().local_children(dir.path))
    local.push_back(ObjectEntry{n.path.substr(n.path.rfind('/') + 1), false, n.size, n.mtime, n.etag});
  size_t first_remote = local.size();
  dir.stream = std::make_unique<DirectoryStream>(fs.client(), fs.listing_prefix(dir.path), std::move(local));
  NSBOX_CHECK(dir.stream->at(first_remote));
  return {};
}

// A listing read to its end (within the budget) answers lookups for a while.
void cache_if_whole(BucketFs& fs, OpenDir& dir) {
  if (auto whole = dir.stream->take_whole()) fs.inodes().cache_listing(dir.path, std::move(whole->entries), whole->since);
}

Node node_from(const std::string& path, const ObjectEntry& e) {
  Node n;
  n.path = path;
  n.is_dir = e.is_prefix;
  n.size = e.size;
  n.mtime = e.mtime;
  n.etag = e.etag;
  n.seen_at = Clock::now();
  return n;
}

void reply_negative(fuse_req_t req) {
  fuse_entry_param entry{};
  entry.entry_timeout = BucketFs::kAttrTimeoutS;  // ino 0: "no such name", cached as such
  fuse_reply_entry(req, &entry);
}

// What the remote has at `path`: an object, a directory (keys below it, or its marker),
// or nothing. Two requests, as a name can be both; the directory wins.
Result<std::optional<Node>> look_up_remote(BucketFs& fs, const std::string& path) {
  auto below = NSBOX_TRY(fs.client().list(fs.listing_prefix(path), true, "", 1));
  if (!below.entries.empty() || below.has_marker) {
    Node n;
    n.path = path;
    n.is_dir = true;
    n.seen_at = Clock::now();
    return std::optional<Node>(n);
  }
  auto head = NSBOX_TRY(fs.client().head(fs.key_of(path)));
  if (!head) return std::optional<Node>();
  return std::optional<Node>(node_from(path, {path, false, head->size, head->mtime, head->etag}));
}

void forget_listing_of(BucketFs& fs, const std::string& path) { fs.inodes().invalidate_listing(parent_of(path)); }

void op_init(void*, fuse_conn_info* conn) {
  conn->max_background = 64;  // the kernel's 12 starves parallel readers
  conn->congestion_threshold = 48;
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;  // writes go to the staging file as they come
  // Every readdir carries its entries' attributes: `ls -l` then asks nothing per name. The
  // kernel's "auto" mode would ask for them only on a directory's first page, and ls reads
  // every page before its first stat.
  if (conn->capable & FUSE_CAP_READDIRPLUS) conn->want |= FUSE_CAP_READDIRPLUS;
  conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
}

// The inode at `path` when it is the truth about it: created or being written here, or
// confirmed by the remote under kListingTtl ago.
std::optional<Node> trusted_node(BucketFs& fs, const std::string& path) {
  auto ino = fs.inodes().find(path);
  if (!ino) return std::nullopt;
  auto known = fs.inodes().get(*ino);
  if (known && (known->local || known->writers > 0 || Clock::now() - known->seen_at < InodeTable::kListingTtl)) return known;
  return std::nullopt;
}

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  BucketFs& fs = fs_of(req);
  auto dir = fs.inodes().get(parent);
  if (!dir) return (void)fuse_reply_err(req, ENOENT);
  if (std::strlen(name) > 255) return (void)fuse_reply_err(req, ENAMETOOLONG);
  if (!valid_new_name(fs, name)) return reply_negative(req);  // nothing can be there (nor asked for)
  std::string path = join(dir->path, name);
  if (auto known = trusted_node(fs, path)) return reply_node(req, fs, *known);
  if (auto cached = fs.inodes().cached_entry(dir->path, name)) {
    if (!*cached) return reply_negative(req);
    return reply_node(req, fs, node_from(path, **cached));
  }
  auto found = look_up_remote(fs, path);
  if (!found) return (void)fuse_reply_err(req, errno_of(found.error(), "lookup"));
  if (!*found) return reply_negative(req);
  reply_node(req, fs, **found);
}

void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  fs_of(req).inodes().forget(ino, nlookup);
  fuse_reply_none(req);
}

void op_forget_multi(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  for (size_t i = 0; i < count; ++i) fs_of(req).inodes().forget(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  BucketFs& fs = fs_of(req);
  auto node = fs.inodes().get(ino);
  if (!node) return (void)fuse_reply_err(req, ENOENT);
  struct stat st = fs.attributes(ino, *node);
  fuse_reply_attr(req, &st, BucketFs::kAttrTimeoutS);
}

void op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  BucketFs& fs = fs_of(req);
  auto node = fs.inodes().get(ino);
  if (!node) return (void)fuse_reply_err(req, ENOENT);
  auto dir = std::make_unique<OpenDir>();
  dir->path = node->path;
  // The first page now: a directory that cannot be listed fails at its open.
  if (auto listed = list_from_start(fs, *dir); !listed) return (void)fuse_reply_err(req, errno_of(listed.error(), "readdir"));
  cache_if_whole(fs, *dir);
  fi->fh = reinterpret_cast<uint64_t>(dir.release());
  fuse_reply_open(req, fi);
}

// Adds entry `i` of `dir` to a readdir reply (at `out`, `room` bytes); returns the size it
// needs (nothing is added when that is more than `room`). With `plus`, a settled entry
// carries its attributes and counts a lookup, as op_lookup would answer; one not settled
// carries none, and the kernel looks it up.
size_t add_entry(fuse_req_t req, BucketFs& fs, OpenDir& dir, fuse_ino_t ino, uint64_t i, const ObjectEntry* listed,
                 bool plus, char* out, size_t room) {
  std::string name = listed ? listed->name : (i == 0 ? "." : "..");
  std::string path = join(dir.path, name.c_str());
  fuse_entry_param entry{};
  entry.attr.st_mode = !listed || listed->is_prefix ? S_IFDIR : S_IFREG;
  entry.attr.st_ino = !listed ? ino : fs.inodes().find(path).value_or(std::hash<std::string>{}(path) | (1ull << 62));
  if (!plus) return fuse_add_direntry(req, out, room, name.c_str(), &entry.attr, static_cast<off_t>(i + 1));
  if (listed && dir.stream->settled(i - 2)) {
    Node node = trusted_node(fs, path).value_or(node_from(path, *listed));
    entry.ino = fs.inodes().remember(node);
    entry.attr = fs.attributes(entry.ino, fs.inodes().get(entry.ino).value_or(node));
    entry.attr_timeout = entry.entry_timeout = BucketFs::kAttrTimeoutS;
  }
  size_t need = fuse_add_direntry_plus(req, out, room, name.c_str(), &entry, static_cast<off_t>(i + 1));
  if (need > room && entry.ino != 0) fs.inodes().forget(entry.ino, 1);  // not sent: not counted
  return need;
}

// Entry i of the handle is ".", "..", then the stream's entry i - 2 (the offset the kernel
// passes back is the index of the next one).
void reply_entries(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, fuse_file_info* fi, bool plus) {
  BucketFs& fs = fs_of(req);
  auto& dir = *reinterpret_cast<OpenDir*>(fi->fh);
  std::string buffer(size, '\0');
  size_t used = 0;
  {
    std::lock_guard lock(dir.mutex);
    // Asked for the start again after a reply: a rewinddir, which lists anew.
    if (offset == 0 && dir.replied)
      if (auto listed = list_from_start(fs, dir); !listed) return (void)fuse_reply_err(req, errno_of(listed.error(), "readdir"));
    dir.replied = true;
    for (uint64_t i = static_cast<uint64_t>(offset);; ++i) {
      const ObjectEntry* listed = nullptr;
      if (i >= 2) {
        // One page per reply: the kernel may ask again from any entry of this reply, and
        // the stream keeps one page (an earlier one would mean listing again from the start).
        if (used > 0 && dir.stream->needs_request(i - 2)) break;
        auto entry = dir.stream->at(i - 2);
        if (!entry && used == 0) return (void)fuse_reply_err(req, errno_of(entry.error(), "readdir"));
        if (!entry || !*entry) break;  // a failure after some entries: the next call says it
        listed = *entry;
      }
      size_t need = add_entry(req, fs, dir, ino, i, listed, plus, buffer.data() + used, size - used);
      if (need > size - used) break;
      used += need;
    }
    cache_if_whole(fs, dir);
  }
  // Replied to once unlocked: the reply lets the kernel send RELEASEDIR, which frees `dir`.
  fuse_reply_buf(req, buffer.data(), used);
}

void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, fuse_file_info* fi) {
  reply_entries(req, ino, size, offset, fi, false);
}

void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, fuse_file_info* fi) {
  reply_entries(req, ino, size, offset, fi, true);
}

void op_releasedir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  delete reinterpret_cast<OpenDir*>(fi->fh);
  fuse_reply_err(req, 0);
}

// The object goes now; a writer still holding the file uploads nothing at its close.
void op_unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  BucketFs& fs = fs_of(req);
  if (fs.options().read_only) return (void)fuse_reply_err(req, EROFS);
  auto dir = fs.inodes().get(parent);
  if (!dir) return (void)fuse_reply_err(req, ENOENT);
  std::string path = join(dir->path, name);
  if (auto r = fs.client().remove(fs.key_of(path)); !r) return (void)fuse_reply_err(req, errno_of(r.error(), "unlink"));
  fs.inodes().unlink(path);
  forget_listing_of(fs, path);
  fuse_reply_err(req, 0);
}

// A directory is a zero-byte "name/" marker, so that it exists before anything is in it.
void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t) {
  BucketFs& fs = fs_of(req);
  if (fs.options().read_only) return (void)fuse_reply_err(req, EROFS);
  if (!valid_new_name(fs, name)) return (void)fuse_reply_err(req, EINVAL);
  auto dir = fs.inodes().get(parent);
  if (!dir) return (void)fuse_reply_err(req, ENOENT);
  Node node;
  node.path = join(dir->path, name);
  node.is_dir = true;
  node.mtime = std::time(nullptr);
  node.seen_at = Clock::now();
  if (auto r = fs.client().upload(fs.listing_prefix(node.path), -1, 0); !r)
    return (void)fuse_reply_err(req, errno_of(r.error(), "mkdir"));
  fs.inodes().invalidate_listing(dir->path);
  reply_node(req, fs, node);
}

void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  BucketFs& fs = fs_of(req);
  if (fs.options().read_only) return (void)fuse_reply_err(req, EROFS);
  auto dir = fs.inodes().get(parent);
  if (!dir) return (void)fuse_reply_err(req, ENOENT);
  std::string path = join(dir->path, name);
  // Two keys: the marker sorts first, and a second one means the directory has more.
  auto below = fs.client().list(fs.listing_prefix(path), false, "", 2);
  if (!below) return (void)fuse_reply_err(req, errno_of(below.error(), "rmdir"));
  if (!below->entries.empty()) return (void)fuse_reply_err(req, ENOTEMPTY);
  if (auto r = fs.client().remove(fs.listing_prefix(path)); !r) return (void)fuse_reply_err(req, errno_of(r.error(), "rmdir"));
  fs.inodes().unlink(path);
  forget_listing_of(fs, path);
  fuse_reply_err(req, 0);
}

// A file is renamed by copy then delete: not atomic (docs/semantics.md); one still being
// written moves with its writers, whose next upload goes to the new name. A directory is
// not renamed here: EXDEV makes mv(1) copy and delete it file by file.
void op_rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t new_parent, const char* new_name,
               unsigned int flags) {
  BucketFs& fs = fs_of(req);
  if (fs.options().read_only) return (void)fuse_reply_err(req, EROFS);
  if (flags != 0) return (void)fuse_reply_err(req, EINVAL);
  if (!valid_new_name(fs, new_name)) return (void)fuse_reply_err(req, EINVAL);
  auto from_dir = fs.inodes().get(parent);
  auto to_dir = fs.inodes().get(new_parent);
  if (!from_dir || !to_dir) return (void)fuse_reply_err(req, ENOENT);
  std::string from = join(from_dir->path, name), to = join(to_dir->path, new_name);
  auto ino = fs.inodes().find(from);
  auto node = ino ? fs.inodes().get(*ino) : std::nullopt;
  if (node && node->is_dir) return (void)fuse_reply_err(req, EXDEV);
  if (!node || !node->local) {  // a file not uploaded yet has nothing in the bucket to move
    if (auto r = fs.client().copy(fs.key_of(from), fs.key_of(to)); !r)
      return (void)fuse_reply_err(req, errno_of(r.error(), "rename"));
    if (auto r = fs.client().remove(fs.key_of(from)); !r) return (void)fuse_reply_err(req, errno_of(r.error(), "rename"));
  }
  fs.inodes().rename(from, to);
  forget_listing_of(fs, from);
  forget_listing_of(fs, to);
  fuse_reply_err(req, 0);
}

void op_statfs(fuse_req_t req, fuse_ino_t) {
  struct statvfs st{};
  st.f_bsize = st.f_frsize = 4096;
  st.f_blocks = st.f_bfree = st.f_bavail = 1ull << 40;  // a bucket has no size to tell
  st.f_files = st.f_ffree = 1ull << 32;
  st.f_namemax = 255;
  fuse_reply_statfs(req, &st);
}

}  // namespace

int errno_of(const Error& e, const char* op) {
  log::limited(log::Level::kWarn, op, std::string(op) + ": " + e.message);
  return errno_for(e);
}

bool valid_new_name(const BucketFs& fs, const char* name) {
  std::string_view n(name);
  for (unsigned char c : n)
    if (c < 0x20 || c == 0x7f) return false;
  if (fs.options().azure_names && (n.find('\\') != std::string_view::npos || n.ends_with('.'))) return false;
  return true;
}

void reply_node(fuse_req_t req, BucketFs& fs, const Node& node) {
  fuse_entry_param entry{};
  entry.ino = fs.inodes().remember(node);
  // What the table keeps (a file being written here keeps its own size), not what came in.
  Node kept = fs.inodes().get(entry.ino).value_or(node);
  entry.attr = fs.attributes(entry.ino, kept);
  entry.attr_timeout = entry.entry_timeout = BucketFs::kAttrTimeoutS;
  fuse_reply_entry(req, &entry);
}

}  // namespace nsbox::bucket::fs_ops

namespace nsbox::bucket {

struct stat BucketFs::attributes(fuse_ino_t ino, const Node& node) const {
  struct stat st{};
  st.st_ino = ino;
  st.st_mode = node.is_dir ? (S_IFDIR | 0755) : (S_IFREG | (options_.read_only ? 0444 : 0644));
  st.st_nlink = node.is_dir ? 2 : 1;
  st.st_uid = options_.uid;
  st.st_gid = options_.gid;
  st.st_size = static_cast<off_t>(node.size);
  st.st_blksize = 1 << 20;
  st.st_blocks = static_cast<blkcnt_t>((node.size + 511) / 512);
  st.st_mtim.tv_sec = st.st_ctim.tv_sec = st.st_atim.tv_sec = node.mtime ? node.mtime : mounted_at_;
  return st;
}

const fuse_lowlevel_ops& BucketFs::operations() {
  using namespace fs_ops;
  static const fuse_lowlevel_ops ops = [] {
    fuse_lowlevel_ops o{};
    o.init = op_init;
    o.lookup = op_lookup;
    o.forget = op_forget;
    o.forget_multi = op_forget_multi;
    o.getattr = op_getattr;
    o.setattr = op_setattr;
    o.opendir = op_opendir;
    o.readdir = op_readdir;
    o.readdirplus = op_readdirplus;
    o.releasedir = op_releasedir;
    o.open = op_open;
    o.create = op_create;
    o.read = op_read;
    o.write = op_write;
    o.flush = op_flush;
    o.fsync = op_fsync;
    o.release = op_release;
    o.unlink = op_unlink;
    o.mkdir = op_mkdir;
    o.rmdir = op_rmdir;
    o.rename = op_rename;
    o.statfs = op_statfs;
    return o;
  }();
  return ops;
}

}  // namespace nsbox::bucket
