#include "runtime/core/volume_store.h"

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <vector>

#include "isolation/sys/files.h"
#include "isolation/sys/rfc3339.h"
#include "isolation/subordinate_ids.h"
#include "isolation/userns.h"
#include "mounts/volume_image.h"
#include "runtime/core/volume_skeleton.h"

namespace nsbox {
namespace {

// A formatted image that is only ever copied (never attached): one per size, owner and
// skeleton (`tag`: what skeleton_tag says of it; empty: none).
std::string template_name(uint64_t bytes, const userns::HostIds& ids, const std::string& tag) {
  return ".template-" + std::to_string(bytes) + "-" + std::to_string(ids.uid) + "-" + std::to_string(ids.gid) +
         (tag.empty() ? "" : "-" + tag) + ".img";
}

// When a template is made, the oldest templates are removed (sizes no longer asked for), so
// that a store seeing many quotas holds at most this many (each ~0.25 MiB on disk).
constexpr size_t kMaxTemplates = 16;

// "<final name>.making.<pid>.<thread>": unique among the threads of a server, and says
// whose it is.
std::string temp_name(const std::string& final_name) {
  return final_name + ".making." + std::to_string(::getpid()) + "." + std::to_string(::gettid());
}

bool is_temp_of_dead_maker(const std::string& entry) {
  auto making = entry.find(".making.");
  if (making == std::string::npos) return false;
  pid_t maker = static_cast<pid_t>(std::strtol(entry.c_str() + making + 8, nullptr, 10));
  return maker > 0 && ::kill(maker, 0) != 0 && errno == ESRCH;
}

}  // namespace

nlohmann::json Volume::to_json() const {
  return {{"name", name}, {"named", named}, {"kind", image ? "image" : "directory"},
          {"quota_bytes", quota_bytes}, {"path", path}, {"created_at", created_at}};
}

bool VolumeStore::quotas_supported() {
  static const bool supported = static_cast<bool>(volume_image::available());
  return supported;
}

Result<void> VolumeStore::validate_name(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 63;
  for (size_t i = 0; ok && i < name.size(); ++i) {
    char c = name[i];
    ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (i > 0 && (c == '-' || c == '_' || c == '.'));
  }
  if (!ok)
    return fail(make_error(ErrorCode::kInvalidArgument, "invalid volume name '" + name + "'",
                           "names are 1-63 characters of a-z, 0-9, '-', '_' and '.', starting with a letter or digit"));
  return {};
}

Result<void> VolumeStore::save(const Volume& v) const {
  nlohmann::json j = v.to_json();
  j.erase("path");
  return files::atomic_write(meta_path(v.name), j.dump(2) + "\n", 0600);
}

Result<uint64_t> VolumeStore::free_bytes() const {
  struct statvfs s{};
  if (::statvfs(dir().c_str(), &s) != 0) return fail(sys_error("statvfs " + dir()));
  return uint64_t(s.f_bavail) * s.f_frsize;
}

Result<uint64_t> VolumeStore::default_quota(uint64_t preferred) const {
  uint64_t free = NSBOX_TRY(free_bytes());
  if (free >= 2 * preferred) return preferred;
  constexpr uint64_t kStep = 256ull << 20;
  uint64_t quota = free / 2 / kStep * kStep;
  if (quota < kStep)
    return fail(make_error(ErrorCode::kLimitExceeded, "only " + format_bytes(free) + " free on " + dir() + ": too little for a " + std::string(kind_ == VolumeKind::kHome ? "home" : "files") + " volume",
                           "free some disk space"));
  return quota;
}

// mkfs costs a process and 7-30 ms of CPU per image; copying the size's template (its
// ~0.25 MiB of metadata, synced) 0.7 ms of CPU and ~1.6 ms in all, which is why create
// formats inline, with no spare image made ahead by a child (docs/design.md, "Volumes"). The
// template is made by mkfs the first time a size is asked for.
Result<void> VolumeStore::format(const std::string& image, uint64_t bytes) const {
  auto ids = userns::host_ids();
  const std::string tag = skeleton_tag(skeleton_);
  std::string formatted = dir() + "/" + template_name(bytes, ids, tag);
  // Twice at most: another thread may remove this template (the oldest of more than
  // kMaxTemplates) between our check and our copy; it is made again.
  for (int attempt = 0;; ++attempt) {
    if (!files::exists(formatted)) {
      NSBOX_CHECK(tidy_images());
      std::string temp = temp_name(formatted);
      ::unlink(temp.c_str());  // an earlier maker's of the same pid and thread (a restart): dead
      if (tag.empty()) {
        NSBOX_CHECK(volume_image::create(temp, bytes, ids.uid, ids.gid));
      } else {
        std::string stage = temp + ".skeleton";
        auto made = stage_skeleton(skeleton_, stage, ids);
        if (made) made = volume_image::create(temp, bytes, ids.uid, ids.gid, stage);
        (void)files::remove_tree(stage);
        NSBOX_CHECK(std::move(made));
      }
      // Two makers at once each rename a whole image: either one is the template.
      if (::rename(temp.c_str(), formatted.c_str()) != 0) {
        ::unlink(temp.c_str());
        return fail(sys_error("rename " + temp));
      }
    }
    auto copied = volume_image::copy(formatted, image);
    if (copied || attempt > 0 || files::exists(formatted)) return copied;
  }
}

// Run before a template is made (rarely): what makers that died half-way (their host was
// shut down) left, templates' and restores' (SnapshotStore makes a volume beside the one it
// replaces), the spare images of nsbox before templates, and the oldest templates beyond
// kMaxTemplates.
Result<void> VolumeStore::tidy_images() const {
  std::vector<std::pair<int64_t, std::string>> made;  // (mtime, path)
  for (const auto& entry : NSBOX_TRY(files::list_dir(dir()))) {
    std::string path = dir() + "/" + entry;
    bool is_template = entry.rfind(".template-", 0) == 0;
    bool is_temp = entry.find(".making.") != std::string::npos;
    if (!is_template && !is_temp && entry.rfind(".spare-", 0) != 0) continue;
    if (is_temp) {
      if (is_temp_of_dead_maker(entry) && ::unlink(path.c_str()) != 0 && errno == EISDIR) (void)files::remove_tree(path);
    } else if (!is_template) {
      ::unlink(path.c_str());
    } else if (struct stat st{}; ::stat(path.c_str(), &st) == 0) {
      made.emplace_back(st.st_mtim.tv_sec, path);
    }
  }
  if (made.size() < kMaxTemplates) return {};
  std::sort(made.begin(), made.end());
  for (size_t i = 0; i + kMaxTemplates <= made.size(); ++i) ::unlink(made[i].second.c_str());
  return {};
}

Result<Volume> VolumeStore::create(const std::string& name, bool named, uint64_t quota_bytes) {
  NSBOX_CHECK(files::ensure_private_dir(root_.data_dir));
  NSBOX_CHECK(files::ensure_private_dir(dir()));
  if (files::exists(meta_path(name)))
    return fail(make_error(ErrorCode::kAlreadyExists, "a volume named '" + name + "' already exists"));
  Volume v{name, named, quotas_supported(), 0, {}, sys::now_rfc3339()};
  if (v.image) {
    v.path = image_path(name);
    if (quota_bytes == 0) {
      quota_bytes = NSBOX_TRY(default_quota());
    } else if (uint64_t free = NSBOX_TRY(free_bytes()); free < quota_bytes) {
      // The host keeps what the sandbox writes: refuse a quota the disk cannot hold now.
      bool home = kind_ == VolumeKind::kHome;
      return fail(make_error(ErrorCode::kLimitExceeded, std::string(home ? "a home size of " : "a files quota of ") + format_bytes(quota_bytes) +
                                                            " is more than the " + format_bytes(free) + " free on " + dir(),
                             home ? "choose a smaller --home-size" : "choose a smaller --files-quota"));
    }
    v.quota_bytes = quota_bytes;
    NSBOX_CHECK(format(v.path, quota_bytes));
  } else {
    v.path = dir_path(name);
    if (::mkdir(v.path.c_str(), 0700) != 0) return fail(sys_error("mkdir " + v.path));
  }
  if (auto r = save(v); !r) {
    (void)files::remove_tree(v.path);
    return fail(std::move(r.error()));
  }
  return v;
}

Result<Volume> VolumeStore::load(const std::string& name) const {
  auto text = files::read_file(meta_path(name));
  if (!text) return fail(make_error(ErrorCode::kNotFound, "no volume '" + name + "'", "`nsbox volume ls` lists them"));
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded()) return fail(make_error(ErrorCode::kInternal, "corrupt volume record " + meta_path(name)));
  Volume v;
  v.name = name;
  v.named = j.value("named", false);
  v.image = j.value("kind", "") == "image";
  v.quota_bytes = j.value("quota_bytes", uint64_t{0});
  v.created_at = j.value("created_at", "");
  v.path = v.image ? image_path(name) : dir_path(name);
  return v;
}

Result<Volume> VolumeStore::open_or_create_named(const std::string& name, uint64_t quota_bytes) {
  NSBOX_CHECK(validate_name(name));
  if (files::exists(meta_path(name))) {
    auto v = NSBOX_TRY(load(name));
    if (!v.named) return fail(make_error(ErrorCode::kAlreadyExists, "volume '" + name + "' belongs to a sandbox"));
    return v;
  }
  return create(name, true, quota_bytes);
}

Result<std::vector<Volume>> VolumeStore::list() const {
  std::vector<Volume> out;
  if (!files::exists(dir())) return out;
  for (const auto& entry : NSBOX_TRY(files::list_dir(dir()))) {
    if (entry.size() < 6 || entry.compare(entry.size() - 5, 5, ".json") != 0) continue;
    if (auto v = load(entry.substr(0, entry.size() - 5))) out.push_back(std::move(*v));
  }
  return out;
}

Result<void> VolumeStore::remove(const Volume& volume) {
  NSBOX_CHECK(subids::remove_tree(volume.path));
  ::unlink((volume.path + ".lock").c_str());
  if (::unlink(meta_path(volume.name).c_str()) != 0 && errno != ENOENT) return fail(sys_error("remove " + meta_path(volume.name)));
  return {};
}

Result<Volume> VolumeStore::keep(const Volume& volume) {
  Volume kept = volume;
  kept.named = true;
  NSBOX_CHECK(save(kept));
  return kept;
}

Result<FilesVolume> VolumeStore::open_files(const Volume& volume) const {
  auto ids = userns::host_ids();
  if (!volume.image) return FilesVolume::open(volume.path, ids.uid, ids.gid);
  auto root = NSBOX_TRY(volume_image::open_privately(volume.path));
  return FilesVolume::adopt(std::move(root), ids.uid, ids.gid);
}

}  // namespace nsbox
