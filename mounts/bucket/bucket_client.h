// What a bucket filesystem needs from an object store, whatever its protocol: S3 (and
// R2, GCS's XML API) in s3_client.cc, Azure Blob in azure_client.cc.
//
// Keys are whole keys in the bucket or container (a mount's prefix included). Every call
// is bounded in time (http::Limits) and retried on transport failures and 5xx/429 answers
// a few times with backoff; what still fails is an error naming the request and the
// remote's answer, never a secret.
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "isolation/sys/error.h"
#include "mounts/http/client.h"
#include "mounts/bucket/mount_spec.h"

namespace nsbox::bucket {

struct ObjectEntry {
  std::string name;  // relative to the listed prefix; a common prefix without its '/'
  bool is_prefix = false;
  uint64_t size = 0;
  std::time_t mtime = 0;
  std::string etag;
};

struct ListPage {
  std::vector<ObjectEntry> entries;
  std::string next_token;  // empty on the last page
  bool has_marker = false;  // a key equal to the prefix itself (a directory marker) exists
};

struct ObjectHead {
  uint64_t size = 0;
  std::time_t mtime = 0;
  std::string etag;
};

// Errors carry an errno a filesystem can return: ENOENT (no such key or bucket), EACCES
// (refused credentials), ESTALE (the object changed since `etag`), EIO (the rest).
class BucketClient {
 public:
  virtual ~BucketClient() = default;

  // One page of the keys under `prefix`; with `delimited`, keys below the next '/' are
  // folded into common prefixes.
  virtual Result<ListPage> list(const std::string& prefix, bool delimited, const std::string& token, int max_keys) = 0;
  virtual Result<std::optional<ObjectHead>> head(const std::string& key) = 0;
  // Up to `length` bytes from `offset` into `buffer`; fewer only at the end of the object.
  // A non-empty `etag` pins the version: a replaced object gives ESTALE, not mixed bytes.
  virtual Result<size_t> read(const std::string& key, const std::string& etag, uint64_t offset, char* buffer,
                              size_t length) = 0;
  // The `size` bytes of `fd` from offset 0 become the object, whole or not at all:
  // one PUT below the multipart threshold, equal-size parts above it. Returns the ETag.
  virtual Result<std::string> upload(const std::string& key, int fd, uint64_t size) = 0;
  virtual Result<void> remove(const std::string& key) = 0;  // a missing key is not an error
  virtual Result<void> copy(const std::string& from, const std::string& to) = 0;
  // The bucket exists and the credentials (or anonymous access) are accepted: what
  // `nsbox create` checks before it mounts.
  virtual Result<void> probe(const std::string& prefix) = 0;
  // The server is stopping: requests under way end within a second and fail (uploads in
  // parts are aborted at the remote, not left there), new ones fail at once. Safe in a
  // signal handler.
  virtual void stop() = 0;
};

// The errno a filesystem call on a bucket mount gives for `e`: the one table from nsbox's
// errors to errnos (docs/semantics.md, "Bucket mounts", says what a caller sees). The
// errno the failing step chose goes through when it tells the caller something true
// about its call: ESTALE (the object changed since the open), EFBIG and EDQUOT (the
// mount's staging budget), ENOSPC (the staging disk's reserve), ENOENT, EACCES... Else
// the error's code decides; what is left (the remote failed, the server did) is EIO.
int errno_for(const Error& e);

std::unique_ptr<BucketClient> make_s3_client(const BucketMount& mount, const BucketCredentials& credentials,
                                             http::Limits limits = {});
std::unique_ptr<BucketClient> make_azure_client(const BucketMount& mount, const BucketCredentials& credentials,
                                                http::Limits limits = {});
std::unique_ptr<BucketClient> make_client(const BucketMount& mount, const BucketCredentials& credentials,
                                          http::Limits limits = {});

}  // namespace nsbox::bucket
