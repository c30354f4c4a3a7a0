// The open files of a bucket filesystem. A file open for reading is an ObjectReader over
// the object as it was at the open; one open for writing is a staging file on the host,
// uploaded whole when written and closed or synced. Each handler replies only after it let
// go of the open file: once the reply is out, the kernel may send RELEASE, and another
// thread frees the file.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <memory>
#include <mutex>

#include "isolation/sys/unique_fd.h"
#include "mounts/bucket/fs_common.h"
#include "mounts/bucket/object_reader.h"

namespace nsbox::bucket::fs_ops {
namespace {

constexpr size_t kDownloadChunk = 8 << 20;
constexpr uint64_t kMaxObjectSize = BucketFs::kMaxObjectSize;
// Staging files are on the host's disk, which no quota of the sandbox covers. Each mount
// has its budget, and all of them together leave the disk's reserve free
// (staging_budget.h): past it a writer gets ENOSPC.

struct OpenFile {
  std::mutex mutex;
  fuse_ino_t ino = 0;
  std::string key;  // at the open: the reader's, and what messages name
  std::unique_ptr<ObjectReader> reader;
  StagingBudget::Claim claim;  // the staging file's size, held in the mount's budget
  UniqueFd staging;
  bool dirty = false;  // written since the last upload: flush/fsync/release upload it
  // Created, or truncated by O_TRUNC, and not written yet: uploaded at release, not at a
  // flush. A shell's `> f` closes a dup of the fd before it writes; uploading the empty
  // file there would cost a PUT and show readers an empty file for a moment.
  bool unsent = false;
};

OpenFile& file_of(fuse_file_info* fi) { return *reinterpret_cast<OpenFile*>(fi->fh); }

bool staging_has_room(BucketFs& fs, uint64_t bytes) {
  struct statvfs st{};
  if (::statvfs(fs.options().staging_dir.c_str(), &st) != 0) return true;
  uint64_t total = static_cast<uint64_t>(st.f_blocks) * st.f_frsize;
  uint64_t free = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  return free >= bytes + staging_disk_reserve(total);
}

Error no_room(BucketFs& fs, const std::string& key) {
  Error e = make_error(ErrorCode::kLimitExceeded, "stage " + key + ": the staging disk (" + fs.options().staging_dir +
                                                      ") is nearly full");
  e.sys_errno = ENOSPC;
  return e;
}

// EFBIG or EDQUOT from the mount's budget, for the log and the caller.
Error over_budget(BucketFs& fs, const std::string& key, uint64_t size, int err) {
  std::string limit = std::to_string(fs.staging_budget().limit());
  Error e = make_error(ErrorCode::kLimitExceeded,
                       "stage " + key + " at " + std::to_string(size) + " bytes: " +
                           (err == EFBIG ? "larger than the mount's staging budget (staging_bytes " + limit + ")"
                                         : "the mount's files being written hold its staging budget (staging_bytes " + limit + ")"));
  e.sys_errno = err;
  return e;
}

// The staging file of `file` is to be `size` bytes: its claim grows (or shrinks) first.
Result<void> claim_staging(BucketFs& fs, OpenFile& file, uint64_t size) {
  if (int err = file.claim.resize(size)) return fail(over_budget(fs, file.key, size, err));
  return {};
}

Result<UniqueFd> staging_file(BucketFs& fs) {
  UniqueFd fd(::open(fs.options().staging_dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (!fd) return fail(sys_error("open a staging file in " + fs.options().staging_dir));
  return fd;
}

// The object's bytes into `fd`: what an open for writing without O_TRUNC (or a truncate
// of a path) starts from. The disk is checked at every chunk: opens run in parallel.
Result<void> download_into(BucketFs& fs, const std::string& key, const Node& node, int fd, uint64_t up_to) {
  std::string buffer(kDownloadChunk, '\0');
  for (uint64_t at = 0; at < std::min(node.size, up_to);) {
    if (!staging_has_room(fs, kDownloadChunk)) return fail(no_room(fs, key));
    size_t want = static_cast<size_t>(std::min<uint64_t>(buffer.size(), up_to - at));
    size_t got = NSBOX_TRY(fs.client().read(key, node.etag, at, buffer.data(), want));
    if (got == 0) break;
    if (::pwrite(fd, buffer.data(), got, static_cast<off_t>(at)) != static_cast<ssize_t>(got))
      return fail(sys_error("write the staging copy of " + key));
    at += got;
  }
  return {};
}

// Uploads to where the inode is now (a rename moves it), unless it was unlinked.
Result<void> upload_staged(BucketFs& fs, OpenFile& f) {
  auto node = fs.inodes().get(f.ino);
  f.dirty = f.unsent = false;
  if (!node || node->unlinked) return {};
  struct stat st{};
  if (::fstat(f.staging.get(), &st) != 0) return fail(sys_error("fstat the staging file of " + f.key));
  std::string etag = NSBOX_TRY(fs.client().upload(fs.key_of(node->path), f.staging.get(), static_cast<uint64_t>(st.st_size)));
  node->size = static_cast<uint64_t>(st.st_size);
  node->etag = etag;
  node->mtime = std::time(nullptr);
  node->local = false;
  node->seen_at = Clock::now();
  fs.inodes().update(f.ino, *node);
  fs.inodes().invalidate_listing(parent_of(node->path));
  return {};
}

// Close-to-open: what this open reads is what the bucket holds now (unless the name was
// confirmed in the last second, or the file is being written here).
Result<void> refresh(BucketFs& fs, fuse_ino_t ino, Node& node) {
  if (node.local || node.writers > 0 || Clock::now() - node.seen_at <= InodeTable::kListingTtl) return {};
  auto head = NSBOX_TRY(fs.client().head(fs.key_of(node.path)));
  if (!head) {
    Error e = make_error(ErrorCode::kNotFound, fs.key_of(node.path) + " is no longer in the bucket");
    e.sys_errno = ENOENT;
    return fail(std::move(e));
  }
  node.size = head->size;
  node.mtime = head->mtime;
  node.etag = head->etag;
  node.seen_at = Clock::now();
  fs.inodes().update(ino, node);
  return {};
}

Result<void> open_for_writing(BucketFs& fs, OpenFile& file, Node& node, int flags) {
  bool truncating = (flags & O_TRUNC) != 0;
  bool downloading = !truncating && node.size > 0 && !node.local;
  file.claim = StagingBudget::Claim(fs.staging_budget());
  if (downloading) NSBOX_CHECK(claim_staging(fs, file, node.size));
  if (!truncating && !staging_has_room(fs, node.size)) return fail(no_room(fs, file.key));
  file.staging = NSBOX_TRY(staging_file(fs));
  file.unsent = truncating;
  if (downloading) NSBOX_CHECK(download_into(fs, file.key, node, file.staging.get(), node.size));
  if (truncating) {
    node.size = 0;
    fs.inodes().update(file.ino, node);
  }
  fs.inodes().add_writer(file.ino);
  return {};
}

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

Result<ReadBytes> read_locked(OpenFile& f, size_t size, off_t offset) {
  std::lock_guard lock(f.mutex);
  if (!f.staging) return f.reader->read(static_cast<uint64_t>(offset), size);
  auto buffer = std::make_shared_for_overwrite<char[]>(size);
  ssize_t n = ::pread(f.staging.get(), buffer.get(), size, offset);
  if (n < 0) return fail(sys_error("read the staging file of " + f.key));
  return ReadBytes{buffer, {buffer.get(), static_cast<size_t>(n)}};
}

// truncate(2) on a path: the old content cut or extended, uploaded now.
Result<void> truncate_path(BucketFs& fs, fuse_ino_t ino, const Node& node, uint64_t size) {
  OpenFile temp;
  temp.ino = ino;
  temp.key = fs.key_of(node.path);
  temp.claim = StagingBudget::Claim(fs.staging_budget());
  NSBOX_CHECK(claim_staging(fs, temp, size));
  temp.staging = NSBOX_TRY(staging_file(fs));
  if (size > 0 && !node.local) NSBOX_CHECK(download_into(fs, temp.key, node, temp.staging.get(), size));
  if (::ftruncate(temp.staging.get(), static_cast<off_t>(size)) != 0) return fail(sys_error("truncate the staging copy"));
  return upload_staged(fs, temp);
}

}  // namespace

void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  BucketFs& fs = fs_of(req);
  auto node = fs.inodes().get(ino);
  if (!node) return (void)fuse_reply_err(req, ENOENT);
  bool writing = (fi->flags & O_ACCMODE) != O_RDONLY;
  if (writing && fs.options().read_only) return (void)fuse_reply_err(req, EROFS);
  auto file = std::make_unique<OpenFile>();
  file->ino = ino;
  file->key = fs.key_of(node->path);
  if (auto r = refresh(fs, ino, *node); !r) return (void)fuse_reply_err(req, errno_of(r.error(), "open"));
  if (writing) {
    if (auto r = open_for_writing(fs, *file, *node, fi->flags); !r) return (void)fuse_reply_err(req, errno_of(r.error(), "open"));
  } else if (node->local || node->writers > 0) {
    // Being written here and not uploaded as it is: read what the bucket has (nothing yet,
    // for a new file). Reads never see another handle's staged bytes.
    file->reader = std::make_unique<ObjectReader>(fs.client(), file->key, node->etag, node->local ? 0 : node->size);
  } else {
    file->reader = std::make_unique<ObjectReader>(fs.client(), file->key, node->etag, node->size);
  }
  fi->fh = reinterpret_cast<uint64_t>(file.release());
  fuse_reply_open(req, fi);
}

void op_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t, fuse_file_info* fi) {
  BucketFs& fs = fs_of(req);
  if (fs.options().read_only) return (void)fuse_reply_err(req, EROFS);
  if (!valid_new_name(fs, name)) return (void)fuse_reply_err(req, EINVAL);
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
  file->claim = StagingBudget::Claim(fs.staging_budget());  // empty: nothing held yet
  file->staging = std::move(*staging);
  file->unsent = true;  // an empty file is a file too
  fuse_entry_param entry{};
  entry.ino = file->ino = fs.inodes().remember(node);
  fs.inodes().add_writer(entry.ino);
  entry.attr = fs.attributes(entry.ino, node);
  entry.attr_timeout = entry.entry_timeout = BucketFs::kAttrTimeoutS;
  fi->fh = reinterpret_cast<uint64_t>(file.release());
  fuse_reply_create(req, &entry, fi);
}

void op_read(fuse_req_t req, fuse_ino_t, size_t size, off_t offset, fuse_file_info* fi) {
  auto bytes = read_locked(file_of(fi), size, offset);
  if (!bytes) return (void)fuse_reply_err(req, errno_of(bytes.error(), "read"));
  fuse_reply_buf(req, bytes->bytes.data(), bytes->bytes.size());  // the window stays alive until it returns
}

void op_write(fuse_req_t req, fuse_ino_t ino, const char* data, size_t size, off_t offset, fuse_file_info* fi) {
  BucketFs& fs = fs_of(req);
  OpenFile& f = file_of(fi);
  uint64_t end = static_cast<uint64_t>(offset) + size;
  if (end > kMaxObjectSize) return (void)fuse_reply_err(req, EFBIG);
  if (!staging_has_room(fs, size)) return (void)fuse_reply_err(req, errno_of(no_room(fs, f.key), "write"));
  ssize_t n = -1;
  int err = EBADF, over = 0;
  {
    std::lock_guard lock(f.mutex);
    // The file's size, not the bytes written, is what goes up: a byte far past the end
    // stages (and uploads) the hole before it too.
    if (f.staging && (over = f.claim.cover(end)) == 0) {
      n = ::pwrite(f.staging.get(), data, size, offset);
      if (n < 0) err = errno;
      else f.dirty = true;
    }
  }
  if (over) return (void)fuse_reply_err(req, errno_of(over_budget(fs, f.key, end, over), "write"));
  if (n < 0) return (void)fuse_reply_err(req, err);
  if (auto node = fs.inodes().get(ino); node && node->size < static_cast<uint64_t>(offset) + static_cast<uint64_t>(n)) {
    node->size = static_cast<uint64_t>(offset) + static_cast<uint64_t>(n);
    fs.inodes().update(ino, *node);
  }
  fuse_reply_write(req, static_cast<size_t>(n));
}

// close() and fsync() are where a write reaches the bucket, and where its failure is told.
void op_flush(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) { upload_and_reply(req, fi, false); }
void op_fsync(fuse_req_t req, fuse_ino_t, int, fuse_file_info* fi) { upload_and_reply(req, fi, true); }

void op_release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  BucketFs& fs = fs_of(req);
  std::unique_ptr<OpenFile> f(&file_of(fi));
  // Also what no flush sent: a file created or truncated and never written.
  if (f->staging && (f->dirty || f->unsent))
    if (auto r = upload_staged(fs, *f); !r) (void)errno_of(r.error(), "upload at release");
  if (f->staging) fs.inodes().remove_writer(ino);
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
    uint64_t size = static_cast<uint64_t>(attr->st_size);
    if (size > kMaxObjectSize) return (void)fuse_reply_err(req, EFBIG);
    OpenFile* open = fi ? &file_of(fi) : nullptr;
    int err = 0;
    if (open && open->staging) {
      std::lock_guard lock(open->mutex);
      uint64_t before = open->claim.held();
      if (auto claimed = claim_staging(fs, *open, size); !claimed) {
        err = errno_of(claimed.error(), "truncate");
      } else if (::ftruncate(open->staging.get(), attr->st_size) != 0) {
        err = errno;
        if (size > before) (void)open->claim.resize(before);
      } else {
        open->dirty = true;
      }
    } else if (auto r = truncate_path(fs, ino, *node, size); !r) {
      err = errno_of(r.error(), "truncate");
    }
    if (err) return (void)fuse_reply_err(req, err);
    node = fs.inodes().get(ino);
    if (!node) return (void)fuse_reply_err(req, ENOENT);
    node->size = size;
    fs.inodes().update(ino, *node);
  }
  struct stat st = fs.attributes(ino, *node);
  fuse_reply_attr(req, &st, BucketFs::kAttrTimeoutS);
}

}  // namespace nsbox::bucket::fs_ops
