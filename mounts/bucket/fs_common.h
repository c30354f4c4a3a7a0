// What the two halves of the bucket filesystem share: bucket_fs.cc (names: lookup,
// listings, unlink, mkdir, rename) and bucket_files.cc (open files: reads, staged writes,
// uploads). Internal to nsbox-bucketfs.
#pragma once

#include <fuse_lowlevel.h>

#include <string>

#include "mounts/bucket/bucket_fs.h"

namespace nsbox::bucket::fs_ops {

inline BucketFs& fs_of(fuse_req_t req) { return *static_cast<BucketFs*>(fuse_req_userdata(req)); }

inline std::string join(const std::string& dir, const char* name) { return dir.empty() ? name : dir + "/" + name; }
inline std::string parent_of(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

// The errno a failure gives the caller (errno_for: the one table); why goes to the
// server's log (the supervisor's), rate-limited per operation (log::limited), so that a
// sandbox cannot fill the host's /run with it.
int errno_of(const Error& e, const char* op);

// A name the sandbox may create: no control characters (S3 listings could not carry them
// back), and on Azure none that the service rewrites ('\\' is read as '/', a trailing '.'
// is dropped), which could land an object outside its name.
bool valid_new_name(const BucketFs& fs, const char* name);

void reply_node(fuse_req_t req, BucketFs& fs, const Node& node);

// The open-file operations (bucket_files.cc).
void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void op_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi);
void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, fuse_file_info* fi);
void op_write(fuse_req_t req, fuse_ino_t ino, const char* data, size_t size, off_t offset, fuse_file_info* fi);
void op_flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info* fi);
void op_release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi);

}  // namespace nsbox::bucket::fs_ops
