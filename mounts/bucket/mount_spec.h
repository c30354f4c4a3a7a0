// A bucket mount as the user asks for it (`--mount s3://bucket/prefix:/data:rw`, or a
// manifest entry) and the credentials that go with it.
//
// A BucketMount is safe to store and show (state files, `inspect`); BucketCredentials
// never are: they go from the nsbox command to the supervisor and on to the mount's
// server through pipes, and nowhere else.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "isolation/sys/error.h"

namespace nsbox::bucket {

enum class BucketKind { kS3, kR2, kGcs, kAzureBlob };
enum class MountStrategy { kBuiltin, kRclone, kS3fs };

std::string_view kind_name(BucketKind kind);  // s3 | r2 | gcs | azure_blob
std::string_view strategy_name(MountStrategy strategy);  // builtin | rclone | s3fs

// What a mount's writes may hold on the host by default (`staging_bytes`): as much as a
// sandbox's files volume (--files-quota's default), so that a bucket mount does not let a
// sandbox spend more of the host's disk than its own /mnt/files does.
inline constexpr uint64_t kDefaultStagingBytes = 10ull << 30;

struct BucketMount {
  BucketKind kind = BucketKind::kS3;
  std::string bucket;   // the container, for Azure
  std::string account;  // Azure storage account; R2 account id
  std::string prefix;   // "" or ending in '/'
  std::string region;
  std::string endpoint_url;  // "" for the service's own
  bool path_style = true;    // path-style addressing unless the endpoint is AWS's own
  std::string mount_path;    // absolute, inside the sandbox
  bool read_only = true;
  MountStrategy strategy = MountStrategy::kBuiltin;
  std::string credentials_file;  // KEY=VALUE lines, the same names as the environment's
  // The most the mount's files open for writing may add up to, by their sizes as their
  // writers see them (holes count: a staged file is uploaded whole, zeros and all). A file
  // larger than this alone gets EFBIG; one the others leave no room for, EDQUOT
  // (bucket_files.cc). rclone's cache is capped at it too; s3fs has no such bound.
  uint64_t staging_bytes = kDefaultStagingBytes;

  std::string source() const;    // s3://bucket/prefix, azblob://account/container/prefix
  std::string describe() const;  // "s3://bucket/prefix at /data (read-only)"
  nlohmann::json to_json() const;
  // to_json() without the credentials file (a path on this host): what a mount is for a
  // state, a snapshot's spec, or a comparison with a trusted manifest's.
  nlohmann::json topology() const;
  static Result<BucketMount> from_json(const nlohmann::json& j);
};

struct BucketCredentials {
  std::string access_key_id;      // S3, R2, GCS HMAC id
  std::string secret_access_key;  // and its secret
  std::string session_token;
  std::string azure_key;  // base64 account key (SharedKey)
  std::string azure_sas;  // a SAS token, without the leading '?'

  bool anonymous() const { return access_key_id.empty() && azure_key.empty() && azure_sas.empty(); }
  std::vector<std::string> secrets() const;  // every value that must never be shown
  // Overwrites every value, then empties it: for a holder that no longer needs them.
  void wipe();
  nlohmann::json to_json() const;
  static BucketCredentials from_json(const nlohmann::json& j);
};

// A mount and its credentials: what goes from the nsbox command to the supervisor (in
// memory and pipes only) and on to the mount's server.
struct MountRequest {
  BucketMount mount;
  BucketCredentials credentials;
};

using Environment = std::vector<std::pair<std::string, std::string>>;

// `--mount` syntax: SCHEME://SOURCE:PATH[:rw|:ro][:staging_bytes=SIZE] with schemes s3,
// r2, gs, azblob.
Result<BucketMount> parse_mount_flag(std::string_view flag);
// A manifest: a JSON array of entries, or {"mounts": [...]}.
Result<std::vector<BucketMount>> parse_manifest(std::string_view text, std::string_view source_name);

// A size as `staging_bytes` takes it: bytes, or a whole number with K, M, G, T or P (binary,
// "512M", "10G"); at least 1 MiB, at most 1 PiB.
Result<uint64_t> parse_staging_bytes(std::string_view text);

// Mount paths that can go into one sandbox together: each a valid mount path, none the
// same as another or inside it (a mount would hide or be hidden by the other). For the
// CLI and for Runtime::create, which may be given mounts that no parser checked.
Result<void> check_mount_paths(const std::vector<std::string>& mount_paths);

// Fills the region and endpoint a mount leaves out and finds its credentials: the
// credentials file when the mount names one, else `env` (the nsbox command's).
// Anonymous when there are none. What it fills from the environment is checked as the
// mount's own fields are (an http(s) endpoint, a plain region and account).
Result<BucketCredentials> resolve(BucketMount& mount, const Environment& env);
// The variables resolve() reads a kind's credentials from, for an error's hint.
std::string credential_variables(BucketKind kind);

// `text` with every secret replaced by "[redacted]": for messages that quote a remote.
std::string redact(std::string text, const BucketCredentials& credentials);

}  // namespace nsbox::bucket
