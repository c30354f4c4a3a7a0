#include "runtime/core/sandbox_removal.h"

#include "isolation/sys/files.h"
#include "runtime/core/volume_store.h"

namespace nsbox {

Result<void> remove_mount_caches(const StateRoot& root, const std::string& id) {
  if (std::string shared = root.shared_dir(id); files::exists(shared)) NSBOX_CHECK(files::remove_tree(shared));
  std::string staging = root.data_dir + "/staging";
  if (!files::exists(staging)) return {};
  for (const auto& name : NSBOX_TRY(files::list_dir(staging)))
    if (name.starts_with(id + "-")) NSBOX_CHECK(files::remove_tree(staging + "/" + name));
  return {};
}

Result<void> remove_sandbox_files(const StateStore& store, const std::string& id, const Result<SandboxRecord>& record,
                                  bool keep_files) {
  if (record && !record->spec.volume.empty()) {
    VolumeStore volumes(store.root());
    if (auto volume = volumes.load(record->spec.volume); volume && !volume->named) {
      if (keep_files) NSBOX_CHECK(volumes.keep(*volume));
      else NSBOX_CHECK_CTX(volumes.remove(*volume), "remove the files volume of " + id);
    }
  }
  if (record && !record->facts.home.empty()) {
    VolumeStore homes(store.root(), VolumeKind::kHome);
    if (auto home = homes.load(record->facts.home)) NSBOX_CHECK_CTX(homes.remove(*home), "remove the home volume of " + id);
  }
  NSBOX_CHECK_CTX(remove_mount_caches(store.root(), id), "remove the bucket mount caches of " + id);
  NSBOX_CHECK(files::remove_tree(store.root().sandbox_dir(id)));
  store.release_name(record ? record->spec.name : std::string(), id);
  return {};
}

}  // namespace nsbox
