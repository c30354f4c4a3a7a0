// Files volumes of a state root: each sandbox's own (named after the sandbox, deleted with
// it unless kept), and named volumes that outlive sandboxes and can be shared by several.
//
//   root:     <data>/volumes/<name>.img   an ext4 image: its size is the quota
//   rootless: <data>/volumes/<name>/      a directory (loop devices need root: no quota)
//   both:     <data>/volumes/<name>.json  what the volume is
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
#include "runtime/state_store.h"

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

class VolumeStore {
 public:
  static constexpr uint64_t kDefaultQuota = 10ull << 30;

  explicit VolumeStore(StateRoot root) : root_(std::move(root)) {}

  static bool quotas_supported();  // volume_image::available(): root, loop devices, mkfs.ext4
  static Result<void> validate_name(const std::string& name);

  // quota_bytes 0: default_quota(). An explicit quota larger than the free disk is refused.
  Result<Volume> create(const std::string& name, bool named, uint64_t quota_bytes);
  // 10 GiB, or half the free space of the volumes' disk (in 256 MiB steps) when that is
  // less: images are sparse, so a quota past the free space would let a sandbox fill the
  // host's disk, and its ext4 would see I/O errors rather than ENOSPC.
  Result<uint64_t> default_quota() const;
  Result<Volume> load(const std::string& name) const;
  Result<Volume> open_or_create_named(const std::string& name, uint64_t quota_bytes);
  Result<std::vector<Volume>> list() const;
  Result<void> remove(const Volume& volume);
  // `nsbox rm --keep-files`: the sandbox's volume becomes a named one, same name.
  Result<Volume> keep(const Volume& volume);

  // The volume's files, for host-side operations.
  Result<FilesVolume> open_files(const Volume& volume) const;

  // A pre-formatted spare image of the default size keeps mkfs off `create`'s path.
  // make_spare() formats one if none is waiting; create() uses it when it fits.
  Result<void> make_spare() const;

 private:
  Result<uint64_t> free_bytes() const;
  std::string dir() const { return root_.data_dir + "/volumes"; }
  std::string meta_path(const std::string& name) const { return dir() + "/" + name + ".json"; }
  std::string image_path(const std::string& name) const { return dir() + "/" + name + ".img"; }
  std::string dir_path(const std::string& name) const { return dir() + "/" + name; }
  bool take_spare(const std::string& image, uint64_t quota_bytes) const;
  Result<void> save(const Volume& v) const;

  StateRoot root_;
};

}  // namespace nsbox
