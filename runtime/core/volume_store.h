// Volumes of a state root. Files volumes: each sandbox's own (named after the sandbox,
// deleted with it unless kept), and named volumes that outlive sandboxes and can be shared
// by several. Home volumes: each sandbox's /home/user, kept across stop and start, gone
// with the sandbox, never seen through the files API.
//
//   root:     <data>/<kind>/<name>.img   an ext4 image: its size is the quota
//   rootless: <data>/<kind>/<name>/      a directory (loop devices need root: no quota)
//   both:     <data>/<kind>/<name>.json  what the volume is
//
// <kind> is `volumes` (files) or `homes`.
//
// Host-side file operations (the files API) mount the image privately in a helper: the
// same loop device as a running sandbox's mount when there is one, so one superblock.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "isolation/sys/error.h"
#include "mounts/files_volume.h"
#include "runtime/core/state_store.h"

namespace nsbox {

struct Volume {
  std::string name;
  bool named = false;        // outlives its sandboxes
  bool image = false;        // an ext4 image with a quota, or (rootless) a plain directory
  uint64_t quota_bytes = 0;  // 0: not enforced
  std::string path;          // the image, or the directory
  std::string created_at;

  nlohmann::json to_json() const;
};

enum class VolumeKind { kFiles, kHome };

class VolumeStore {
 public:
  static constexpr uint64_t kDefaultQuota = 10ull << 30;  // files volumes

  // `skeleton`: a directory every new volume starts with a copy of, owned by the
  // sandbox's user (homes: InstallLayout::home_skeleton()); empty or absent: none.
  explicit VolumeStore(StateRoot root, VolumeKind kind = VolumeKind::kFiles, std::string skeleton = "")
      : root_(std::move(root)), kind_(kind), skeleton_(std::move(skeleton)) {}

  static bool quotas_supported();  // volume_image::available(): root, loop devices, mkfs.ext4
  static Result<void> validate_name(const std::string& name);

  // quota_bytes 0: default_quota(). An explicit quota larger than the free disk is refused.
  Result<Volume> create(const std::string& name, bool named, uint64_t quota_bytes);
  // `preferred` (files: 10 GiB; homes: the size tier's), or half the free space of the
  // volumes' disk (in 256 MiB steps) when that is less: images are sparse, so a quota past
  // the free space would let a sandbox fill the host's disk, and its ext4 would see I/O
  // errors rather than ENOSPC.
  Result<uint64_t> default_quota(uint64_t preferred = kDefaultQuota) const;
  Result<Volume> load(const std::string& name) const;
  Result<Volume> open_or_create_named(const std::string& name, uint64_t quota_bytes);
  Result<std::vector<Volume>> list() const;
  Result<void> remove(const Volume& volume);
  // `nsbox rm --keep-files`: the sandbox's volume becomes a named one, same name.
  Result<Volume> keep(const Volume& volume);

  // The volume's files, for host-side operations.
  Result<FilesVolume> open_files(const Volume& volume) const;

 private:
  Result<uint64_t> free_bytes() const;
  std::string dir() const { return root_.data_dir + (kind_ == VolumeKind::kHome ? "/homes" : "/volumes"); }
  std::string meta_path(const std::string& name) const { return dir() + "/" + name + ".json"; }
  std::string image_path(const std::string& name) const { return dir() + "/" + name + ".img"; }
  std::string dir_path(const std::string& name) const { return dir() + "/" + name; }
  Result<void> format(const std::string& image, uint64_t bytes) const;
  Result<void> tidy_images() const;
  Result<void> save(const Volume& v) const;

  StateRoot root_;
  VolumeKind kind_;
  std::string skeleton_;
};

}  // namespace nsbox
