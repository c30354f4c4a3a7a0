#include "mounts/bucket/bucket_fs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "isolation/sys/unique_fd.h"
#include "mounts/bucket/object_reader.h"

namespace nsbox::bucket {
namespace {

constexpr int kListPage = 1000;
constexpr size_t kDownloadChunk = 8 << 20;

// An open file: either a reader of the object, or a staging file being written (uploaded
// at flush/fsync/release when dirty).
struct OpenFile {
  std::mutex mutex;
  fuse_ino_t ino = 0;
  std::string key;
  std::unique_ptr<ObjectReader> reader;
  UniqueFd staging;
  bool dirty = false;  // written since the last upload: flush/fsync/release upload it
  // Created, or truncated by O_TRUNC, and not written yet: uploaded at release, not at a
  // flush. A shell's `> f` closes a dup of the fd before it writes; uploading the empty
  // file there would cost a PUT and show readers an empty file for a moment.
  bool unsent = false;
};

struct OpenDir {
  std::vector<ObjectEntry> entries;
};

BucketFs& fs_of(fuse_req_t req) { return *static_cast<BucketFs*>(fuse_req_userdata(req)); }
OpenFile& file_of(fuse_file_info* fi) { return *reinterpret_cast<OpenFile*>(fi->fh); }

std::string join(const std::string& dir, const char* name) { return dir.empty() ? name : dir + "/" + name; }
std::string parent_of(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

// The filesystem answers with an errno; why it did goes to the server's log (the
// supervisor's log), with the request and the remote's answer.
int errno_of(const Error& e, const char* op) {
  std::fprintf(stderr, "nsbox-bucketfs: %s: %s\n", op, e.message.c_str());
  return e.sys_errno == ENOENT || e.sys_errno == EACCES || e.sys_errno == ENOTEMPTY ? e.sys_errno : EIO;
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

void reply_node(fuse_req_t req, BucketFs& fs, const Node& node) {
  fuse_entry_param entry{};
  entry.ino = fs.inodes().remember(node);
  entry.attr = fs.attributes(entry.ino, node);
  entry.attr_timeout = entry.entry_timeout = BucketFs::kAttrTimeoutS;
  fuse_reply_entry(req, &entry);
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

Result<std::vector<ObjectEntry>> list_all(BucketFs& fs, const std::string& dir_path) {
  std::vector<ObjectEntry> all;
  std::string token;
  do {
    auto page = NSBOX_TRY(fs.client().list(fs.listing_prefix(dir_path), true, token, kListPage));
    for (auto& e : page.entries)
      if (!e.name.empty() && e.name != "." && e.name != ".." && e.name.size() <= 255) all.push_back(std::move(e));
    token = page.next_token;
  } while (!token.empty());
  return all;
}

// Staging files are on the host's disk, which no quota of the sandbox covers: a writer
// without end gets ENOSPC while the disk still has kStagingReserve (or 5 %) free.
constexpr uint64_t kStagingReserve = 1ull << 30;

bool staging_has_room(BucketFs& fs, size_t bytes) {
  struct statvfs st{};
  if (::statvfs(fs.options().staging_dir.c_str(), &st) != 0) return true;
  uint64_t total = static_cast<uint64_t>(st.f_blocks) * st.f_frsize;
  uint64_t free = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  return free >= bytes + std::max(kStagingReserve, total / 20);
}

Result<UniqueFd> staging_file(BucketFs& fs) {
  UniqueFd fd(::open(fs.options().staging_dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (!fd) return fail(sys_error("open a staging file in " + fs.options().staging_dir));
  return fd;
}

// The object's bytes into `fd`: what an open for writing without O_TRUNC starts from.
Result<void> download_into(BucketFs& fs, const std::string& key, const Node& node, int fd) {
  std::string buffer(kDownloadChunk, '\0');
  for (uint64_t at = 0; at < node.size;) {
    size_t got = NSBOX_TRY(fs.client().read(key, node.etag, at, buffer.data(), buffer.size()));
    if (got == 0) break;
    if (::pwrite(fd, buffer.data(), got, static_cast<off_t>(at)) != static_cast<ssize_t>(got))
      return fail(sys_error("write the staging copy of " + key));
    at += got;
  }
  return {};
}

Result<void> upload_staged(BucketFs& fs, OpenFile& f) {
  struct stat st{};
  if (::fstat(f.staging.get(), &st) != 0) return fail(sys_error("fstat the staging file of " + f.key));
  std::string etag = NSBOX_TRY(fs.client().upload(f.key, f.staging.get(), static_cast<uint64_t>(st.st_size)));
  f.dirty = false;
  f.unsent = false;
  if (auto node = fs.inodes().get(f.ino)) {
    node->size = static_cast<uint64_t>(st.st_size);
    node->etag = etag;
    node->mtime = std::time(nullptr);
    node->local = false;
    node->seen_at = Clock::now();
    fs.inodes().update(f.ino, *node);
    fs.inodes().invalidate_listing(parent_of(node->path));
  }
  return {};
}

// --- operations -------------------------------------------------------------------------

void op_init(void*, fuse_conn_info* conn) {
  conn->max_background = 64;  // the kernel's 12 starves parallel readers
  conn->congestion_threshold = 48;
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;  // writes go to the staging file as they come
}

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  BucketFs& fs = fs_of(req);
  auto dir = fs.inodes().get(parent);
  if (!dir) return (void)fuse_reply_err(req, ENOENT);
  if (std::strlen(name) > 255) return (void)fuse_reply_err(req, ENAMETOOLONG);
  std::string path = join(dir->path, name);
  if (auto ino = fs.inodes().find(path))
    if (auto known = fs.inodes().get(*ino); known && (known->local || Clock::now() - known->seen_at < InodeTable::kListingTtl))
      return reply_node(req, fs, *known);
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
  auto entries = list_all(fs, node->path);
  if (!entries) return (void)fuse_reply_err(req, errno_of(entries.error(), "readdir"));
  std::map<std::string, ObjectEntry> by_name;
  for (const auto& e : *entries) {
    auto [it, fresh] = by_name.emplace(e.name, e);
    if (!fresh && e.is_prefix) it->second = e;  // a directory wins over a file of its name
  }
  auto dir = std::make_unique<OpenDir>();
  for (const auto& [name, e] : by_name) dir->entries.push_back(e);
  fs.inodes().cache_listing(node->path, std::move(by_name));
  fi->fh = reinterpret_cast<uint64_t>(dir.release());
  fuse_reply_open(req, fi);
}

void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, fuse_file_info* fi) {
  BucketFs& fs = fs_of(req);
  auto& dir = *reinterpret_cast<OpenDir*>(fi->fh);
  auto node = fs.inodes().get(ino);
  std::string buffer(size, '\0');
  size_t used = 0;
  for (size_t i = static_cast<size_t>(offset); i < dir.entries.size() + 2; ++i) {
    struct stat st{};
    std::string name = i == 0 ? "." : i == 1 ? ".." : dir.entries[i - 2].name;
    bool is_dir = i < 2 || dir.entries[i - 2].is_prefix;
    st.st_mode = is_dir ? S_IFDIR : S_IFREG;
    std::string path = node ? join(node->path, name.c_str()) : name;
    st.st_ino = i < 2 ? ino : fs.inodes().find(path).value_or(std::hash<std::string>{}(path) | (1ull << 62));
    size_t need = fuse_add_direntry(req, buffer.data() + used, size - used, name.c_str(), &st, static_cast<off_t>(i + 1));
    if (need > size - used) break;
    used += need;
  }
  fuse_reply_buf(req, buffer.data(), used);
}

void op_releasedir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  delete reinterpret_cast<OpenDir*>(fi->fh);
  fuse_reply_err(req, 0);
}

void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  BucketFs& fs = fs_of(req);
  auto node = fs.inodes().get(ino);
  if (!node) return (void)fuse_reply_err(req, ENOENT);
  bool writing = (fi->flags & O_ACCMODE) != O_RDONLY;
  if (writing && fs.options().read_only) return (void)fuse_reply_err(req, EROFS);
  auto file = std::make_unique<OpenFile>();
  file->ino = ino;
  file->key = fs.key_of(node->path);
  if (!node->local && Clock::now() - node->seen_at > InodeTable::kListingTtl) {
    // Close-to-open: what this open reads is what the bucket holds now.
    auto head = fs.client().head(file->key);
    if (!head) return (void)fuse_reply_err(req, errno_of(head.error(), "open"));
    if (!*head) return (void)fuse_reply_err(req, ENOENT);
    node->size = (*head)->size;
    node->mtime = (*head)->mtime;
    node->etag = (*head)->etag;
    node->seen_at = Clock::now();
    fs.inodes().update(ino, *node);
  }
  if (writing) {
    if (!(fi->flags & O_TRUNC) && !staging_has_room(fs, node->size)) return (void)fuse_reply_err(req, ENOSPC);
    auto staging = staging_file(fs);
    if (!staging) return (void)fuse_reply_err(req, errno_of(staging.error(), "open"));
    file->staging = std::move(*staging);
    file->unsent = (fi->flags & O_TRUNC) != 0;
    if (!file->unsent && node->size > 0 && !node->local)
      if (auto r = download_into(fs, file->key, *node, file->staging.get()); !r)
        return (void)fuse_reply_err(req, errno_of(r.error(), "open"));
    if (file->unsent) {
      node->size = 0;
      fs.inodes().update(ino, *node);
    }
  } else {
    file->reader = std::make_unique<ObjectReader>(fs.client(), file->key, node->etag, node->size);
  }
  fi->fh = reinterpret_cast<uint64_t>(file.release());
  fuse_reply_open(req, fi);
}

void op_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t, fuse_file_info* fi) {
  BucketFs& fs = fs_of(req);
  if (fs.options().read_only) return (void)fuse_reply_err(req, EROFS);
  auto dir = fs.inodes().get(parent);
  if (!dir) return (void)fuse_reply_err(req, ENOENT);
  auto staging = staging_file(fs);
  if (!staging) return (void)fuse_reply_err(req, errno_of(staging.error(), "create"));
  Node node;
  node.path = join(dir->path, name);
  node.mtime = std::time(nullptr);
  node.local = true;
  node.seen_at = Clock::now();
  auto file = std::make_unique<OpenFile>();
  file->key = fs.key_of(node.path);
  file->staging = std::move(*staging);
  file->unsent = true;  // an empty file is a file too
  fuse_entry_param entry{};
  entry.ino = file->ino = fs.inodes().remember(node);
  entry.attr = fs.attributes(entry.ino, node);
  entry.attr_timeout = entry.entry_timeout = BucketFs::kAttrTimeoutS;
  fi->fh = reinterpret_cast<uint64_t>(file.release());
  fuse_reply_create(req, &entry, fi);
}

// Every handler replies only after it let go of the open file: once the reply is out,
// the kernel may send RELEASE, and another thread frees the file.
Result<std::string> read_locked(OpenFile& f, size_t size, off_t offset) {
  std::lock_guard lock(f.mutex);
  if (!f.staging) return f.reader->read(static_cast<uint64_t>(offset), size);
  std::string buffer(size, '\0');
  ssize_t n = ::pread(f.staging.get(), buffer.data(), size, offset);
  if (n < 0) return fail(sys_error("read the staging file of " + f.key));
  buffer.resize(static_cast<size_t>(n));
  return buffer;
}

void op_read(fuse_req_t req, fuse_ino_t, size_t size, off_t offset, fuse_file_info* fi) {
  auto bytes = read_locked(file_of(fi), size, offset);
  if (!bytes) return (void)fuse_reply_err(req, errno_of(bytes.error(), "read"));
  fuse_reply_buf(req, bytes->data(), bytes->size());
}

void op_write(fuse_req_t req, fuse_ino_t ino, const char* data, size_t size, off_t offset, fuse_file_info* fi) {
  BucketFs& fs = fs_of(req);
  OpenFile& f = file_of(fi);
  if (!staging_has_room(fs, size)) {
    std::fprintf(stderr, "nsbox-bucketfs: write to %s: ENOSPC, the staging disk (%s) is nearly full\n", f.key.c_str(),
                 fs.options().staging_dir.c_str());
    return (void)fuse_reply_err(req, ENOSPC);
  }
  ssize_t n = -1;
  int err = EBADF;
  {
    std::lock_guard lock(f.mutex);
    if (f.staging) n = ::pwrite(f.staging.get(), data, size, offset), err = errno;
    if (n >= 0) f.dirty = true;
  }
  if (n < 0) return (void)fuse_reply_err(req, err);
  if (auto node = fs.inodes().get(ino); node && node->size < static_cast<uint64_t>(offset) + static_cast<uint64_t>(n)) {
    node->size = static_cast<uint64_t>(offset) + static_cast<uint64_t>(n);
    fs.inodes().update(ino, *node);
  }
  fuse_reply_write(req, static_cast<size_t>(n));
}

// close() and fsync() are where a write reaches the bucket, and where its failure is told.
void upload_and_reply(fuse_req_t req, fuse_file_info* fi, bool with_unsent) {
  BucketFs& fs = fs_of(req);
  OpenFile& f = file_of(fi);
  int err = 0;
  {
    std::lock_guard lock(f.mutex);
    if (f.staging && (f.dirty || (with_unsent && f.unsent)))
      if (auto r = upload_staged(fs, f); !r) err = errno_of(r.error(), "upload");
  }
  fuse_reply_err(req, err);
}

void op_flush(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) { upload_and_reply(req, fi, false); }
void op_fsync(fuse_req_t req, fuse_ino_t, int, fuse_file_info* fi) { upload_and_reply(req, fi, true); }

void op_release(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  BucketFs& fs = fs_of(req);
  std::unique_ptr<OpenFile> f(&file_of(fi));
  // Also what no flush sent: a file created or truncated and never written.
  if (f->staging && (f->dirty || f->unsent))
    if (auto r = upload_staged(fs, *f); !r) (void)errno_of(r.error(), "upload at release");
  fuse_reply_err(req, 0);
}

// Size changes go through a staging file; times, and modes, are accepted and not kept
// (an object has one mtime, the remote's; every file shows one mode); owners cannot change.
void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi) {
  BucketFs& fs = fs_of(req);
  auto node = fs.inodes().get(ino);
  if (!node) return (void)fuse_reply_err(req, ENOENT);
  if ((to_set & FUSE_SET_ATTR_UID && attr->st_uid != fs.options().uid) ||
      (to_set & FUSE_SET_ATTR_GID && attr->st_gid != fs.options().gid))
    return (void)fuse_reply_err(req, EPERM);
  if (to_set & FUSE_SET_ATTR_SIZE) {
    if (fs.options().read_only) return (void)fuse_reply_err(req, EROFS);
    if (node->is_dir) return (void)fuse_reply_err(req, EISDIR);
    OpenFile* open = fi ? &file_of(fi) : nullptr;
    if (open && open->staging) {
      int err = 0;
      {
        std::lock_guard lock(open->mutex);
        if (::ftruncate(open->staging.get(), attr->st_size) != 0) err = errno;
        else open->dirty = true;
      }
      if (err) return (void)fuse_reply_err(req, err);
    } else {
      // truncate(2) on a path: the new content is the old one cut or extended, uploaded now.
      OpenFile temp;
      temp.ino = ino;
      temp.key = fs.key_of(node->path);
      auto staging = staging_file(fs);
      if (!staging) return (void)fuse_reply_err(req, errno_of(staging.error(), "truncate"));
      temp.staging = std::move(*staging);
      Result<void> r = attr->st_size > 0 && !node->local ? download_into(fs, temp.key, *node, temp.staging.get()) : Result<void>{};
      if (r && ::ftruncate(temp.staging.get(), attr->st_size) != 0) r = fail(sys_error("truncate the staging copy"));
      if (r) r = upload_staged(fs, temp);
      if (!r) return (void)fuse_reply_err(req, errno_of(r.error(), "truncate"));
    }
    node = fs.inodes().get(ino);
    node->size = static_cast<uint64_t>(attr->st_size);
    fs.inodes().update(ino, *node);
  }
  struct stat st = fs.attributes(ino, *node);
  fuse_reply_attr(req, &st, BucketFs::kAttrTimeoutS);
}

void forget_name(BucketFs& fs, const std::string& path) {
  fs.inodes().drop_path(path);
  fs.inodes().invalidate_listing(parent_of(path));
}

void op_unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  BucketFs& fs = fs_of(req);
  if (fs.options().read_only) return (void)fuse_reply_err(req, EROFS);
  auto dir = fs.inodes().get(parent);
  if (!dir) return (void)fuse_reply_err(req, ENOENT);
  std::string path = join(dir->path, name);
  if (auto r = fs.client().remove(fs.key_of(path)); !r) return (void)fuse_reply_err(req, errno_of(r.error(), "unlink"));
  forget_name(fs, path);
  fuse_reply_err(req, 0);
}

// A directory is a zero-byte "name/" marker, so that it exists before anything is in it.
void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t) {
  BucketFs& fs = fs_of(req);
  if (fs.options().read_only) return (void)fuse_reply_err(req, EROFS);
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
  auto below = fs.client().list(fs.listing_prefix(path), false, "", 1);
  if (!below) return (void)fuse_reply_err(req, errno_of(below.error(), "rmdir"));
  if (!below->entries.empty()) return (void)fuse_reply_err(req, ENOTEMPTY);
  if (auto r = fs.client().remove(fs.listing_prefix(path)); !r) return (void)fuse_reply_err(req, errno_of(r.error(), "rmdir"));
  forget_name(fs, path);
  fuse_reply_err(req, 0);
}

// A file is renamed by copy then delete: not atomic (docs/semantics.md). A directory is
// not renamed here: EXDEV makes mv(1) copy and delete it file by file.
void op_rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t new_parent, const char* new_name,
               unsigned int flags) {
  BucketFs& fs = fs_of(req);
  if (fs.options().read_only) return (void)fuse_reply_err(req, EROFS);
  if (flags != 0) return (void)fuse_reply_err(req, EINVAL);
  auto from_dir = fs.inodes().get(parent);
  auto to_dir = fs.inodes().get(new_parent);
  if (!from_dir || !to_dir) return (void)fuse_reply_err(req, ENOENT);
  std::string from = join(from_dir->path, name), to = join(to_dir->path, new_name);
  auto ino = fs.inodes().find(from);
  auto node = ino ? fs.inodes().get(*ino) : std::nullopt;
  if (node && node->is_dir) return (void)fuse_reply_err(req, EXDEV);
  if (node && node->local) return (void)fuse_reply_err(req, EBUSY);  // still being written, not in the bucket yet
  if (auto r = fs.client().copy(fs.key_of(from), fs.key_of(to)); !r) return (void)fuse_reply_err(req, errno_of(r.error(), "rename"));
  if (auto r = fs.client().remove(fs.key_of(from)); !r) return (void)fuse_reply_err(req, errno_of(r.error(), "rename"));
  forget_name(fs, from);
  forget_name(fs, to);
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
