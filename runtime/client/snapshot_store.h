// Snapshots of sandboxes' workspaces (docs/semantics.md, "Snapshots"), kept in a
// directory: <data>/snapshots by default, or --snapshot-dir.
//
//   <dir>/<snp-id>/snapshot.json   what it is: id, name, the sandbox it was taken of, a
//                                  secret-free spec (size, network, mount topology,
//                                  env names), counts, fingerprint
//   <dir>/<snp-id>/home.tar        /home/user, members relative to it
//   <dir>/<snp-id>/files.tar       /mnt/files, with --include-files
//
// With a remote store (--snapshot-store s3://BUCKET/PREFIX, also r2://, gs://, azblob://)
// the bucket holds them instead, as PREFIX/<snp-id>/{home.tar,files.tar,snapshot.json}
// (the record last), moved by nsbox-snapstore (runtime/snapstore/store_main.cc); the
// directory only stages a snapshot being made or restored.
//
// A snapshot is made in <dir>/.making-<snp-id>-<pid> and renamed into place: a failure
// (a full disk, a refused workspace) leaves no partial snapshot. The archives are packed
// and unpacked by nsbox-archive (runtime/archive/archive_main.cc), streamed: memory does
// not grow with the workspace.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <optional>

#include "isolation/sys/error.h"
#include "mounts/bucket/mount_spec.h"
#include "runtime/core/helper_report.h"
#include "runtime/core/state_store.h"
#include "runtime/core/volume_store.h"

namespace nsbox {

struct SnapshotInfo {
  std::string id;    // snp-<random>
  std::string name;  // an alias; may be empty
  std::string sandbox;
  std::string created_at;
  bool include_files = false;
  uint64_t members = 0;
  uint64_t bytes = 0;
  uint64_t skipped = 0;  // left out: FIFOs, sockets, devices, symlinks pointing out
  std::vector<std::string> left_out;  // the first of them (`home/...`, `files/...`)
  // sha-256 over the archives' digests and the spec's: the same workspace and definition
  // give the same fingerprint.
  std::string fingerprint;
  nlohmann::json spec;  // {"size", "net", "mounts", "env_names"}: never a credential or env value
  std::string dir;      // where it is on disk
  int64_t made_ns = 0;  // when its record was written (ns): orders snapshots made within a second

  nlohmann::json to_json() const;
  static Result<SnapshotInfo> from_json(const nlohmann::json& j, std::string dir);
};

// Limits on what a snapshot may hold, for packing and unpacking alike: 100,000 members
// and 4 GiB of file contents, or NSBOX_SNAPSHOT_MAX_MEMBERS / NSBOX_SNAPSHOT_MAX_BYTES.
struct SnapshotLimits {
  uint64_t max_members = 100000;
  uint64_t max_bytes = 4ull << 30;
  static Result<SnapshotLimits> from_environment();
};

// Where a remote store is and how to reach it; the credentials live in memory and go to
// nsbox-snapstore through its stdin only.
struct RemoteSnapshotStore {
  bucket::BucketMount bucket;  // bucket, prefix, endpoint, region (its mount path unused)
  bucket::BucketCredentials credentials;
  std::string helper;  // nsbox-snapstore
  // `url` as --snapshot-store takes it; credentials and endpoint found in `env` as a
  // bucket mount's are.
  static Result<RemoteSnapshotStore> parse(const std::string& url, const bucket::Environment& env, std::string helper);
};

// Where a sandbox went, as a remote store knows it (PREFIX/sandboxes/<id>.json): its
// last snapshot, and whether a drain moved it there (its server answers no more for it).
struct SandboxPointer {
  std::string sandbox, snapshot, at;
  bool moved = false;
};

class SnapshotStore {
 public:
  SnapshotStore(std::string dir, std::string archiver, std::optional<RemoteSnapshotStore> remote = std::nullopt)
      : dir_(std::move(dir)), archiver_(std::move(archiver)), remote_(std::move(remote)) {}
  const std::string& dir() const { return dir_; }

  // Packs the sandbox's home (and files) volume. `skip_home` holds paths relative to
  // /home/user left out (bucket mounts under it).
  Result<SnapshotInfo> create(const SandboxRecord& record, const Volume& home, const Volume& files, const std::string& name,
                              bool include_files, const std::vector<std::string>& skip_home) const;
  Result<std::vector<SnapshotInfo>> list() const;  // oldest first
  Result<SnapshotInfo> find(const std::string& id_or_name) const;
  Result<void> remove(const std::string& id_or_name) const;
  // The fingerprint a snapshot of the sandbox would have now, nothing written: a resume
  // compares it with its snapshot's to skip restoring a workspace that already matches.
  Result<std::string> fingerprint(const SandboxRecord& record, const Volume& home, const Volume& files, bool include_files,
                                  const std::vector<std::string>& skip_home) const;
  // Unpacks a snapshot into the volumes, as the sandbox user; the whole archive is checked
  // before anything is written. `replace`: a stopped sandbox's workspace is replaced, the
  // snapshot unpacked into new volumes beside it and swapped in once complete, so that any
  // failure leaves the workspace as it was. Never into a named files volume.
  Result<void> restore(const SnapshotInfo& snapshot, const Volume& home, const Volume& files, bool replace) const;
  // Packs the directory `subdir` of a volume (reached without following a link; "" the
  // whole volume) as a tar stream into `out_fd` (a pipe its caller reads from another
  // thread), leaving out `skip` (relative to it). nsbox-archive's report.
  Result<nlohmann::json> stream(const Volume& volume, const std::string& subdir, int out_fd, const std::vector<std::string>& skip,
                                const std::string& what) const;

  // With a remote store only (kUnsupported otherwise): the sandbox's pointer (kNotFound
  // when it has none), and the tombstone a drain leaves.
  Result<SandboxPointer> pointer(const std::string& sandbox) const;
  Result<void> mark_moved(const std::string& sandbox, const std::string& snapshot) const;

 private:
  Result<nlohmann::json> run_archiver(std::vector<std::string> argv, const std::string& what, int out_fd = -1) const;
  // nsbox-archive's pack of a volume into `out`, or only its report when `out` is empty.
  Result<nlohmann::json> pack(const Volume& volume, const std::string& out, const std::vector<std::string>& skip,
                              const std::string& what) const;
  Result<nlohmann::json> run_store(const std::vector<std::string>& args, const std::string& what, double timeout_s = 0) const;
  Result<void> restore_from(const SnapshotInfo& snapshot, const Volume& home, const Volume& files, bool replace) const;
  std::string dir_;
  std::string archiver_;
  std::optional<RemoteSnapshotStore> remote_;
};

}  // namespace nsbox
