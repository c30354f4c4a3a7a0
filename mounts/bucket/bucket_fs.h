// A bucket (or a prefix of it) as a FUSE filesystem: libfuse3's low-level API, served by
// many threads, each request answered from the inode table or with the few object-store
// requests it needs. docs/semantics.md ("Bucket mounts") says what each operation does.
#pragma once

#include <fuse_lowlevel.h>
#include <sys/types.h>

#include <cstdint>
#include <ctime>
#include <string>

#include "mounts/bucket/bucket_client.h"
#include "mounts/bucket/inode_table.h"
#include "mounts/bucket/staging_budget.h"

namespace nsbox::bucket {

struct BucketFsOptions {
  uid_t uid = 0;  // the owner every file shows (the sandbox user, as the host sees it)
  gid_t gid = 0;
  bool read_only = true;
  std::string prefix;       // of every key; "" or ending in '/'
  std::string staging_dir;  // host directory for files being written (O_TMPFILE there)
  bool azure_names = false;  // refuse the names Azure Blob rewrites ('\\', a trailing '.')
  uint64_t staging_bytes = kDefaultStagingBytes;  // the mount's staging budget (staging_budget.h)
};

class BucketFs {
 public:
  BucketFs(BucketClient& client, BucketFsOptions options)
      : client_(client), options_(std::move(options)), staging_budget_(options_.staging_bytes, kMaxObjectSize) {}

  static const fuse_lowlevel_ops& operations();  // userdata: a BucketFs*

  BucketClient& client() { return client_; }
  const BucketFsOptions& options() const { return options_; }
  InodeTable& inodes() { return inodes_; }
  StagingBudget& staging_budget() { return staging_budget_; }

  std::string key_of(const std::string& path) const { return options_.prefix + path; }
  std::string listing_prefix(const std::string& dir_path) const {
    return dir_path.empty() ? options_.prefix : options_.prefix + dir_path + "/";
  }
  struct stat attributes(fuse_ino_t ino, const Node& node) const;

  static constexpr double kAttrTimeoutS = 1.0;
  // S3's largest object: past it, writes and truncates get EFBIG rather than an upload the
  // store will refuse at close.
  static constexpr uint64_t kMaxObjectSize = 5ull << 40;

 private:
  BucketClient& client_;
  BucketFsOptions options_;
  StagingBudget staging_budget_;
  InodeTable inodes_;
  std::time_t mounted_at_ = std::time(nullptr);  // the times of directories, which have none
};

}  // namespace nsbox::bucket
