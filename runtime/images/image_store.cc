#include "runtime/images/image_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>

#include "isolation/subordinate_ids.h"
#include "isolation/sys/files.h"
#include "isolation/sys/rfc3339.h"
#include "isolation/sys/sha256.h"
#include "isolation/sys/syscall.h"
#include "runtime/core/command.h"
#include "runtime/core/helper_report.h"
#include "isolation/size_tier.h"

namespace nsbox::images {
namespace {

using json = nlohmann::json;

constexpr double kArchiverTimeoutS = 3600;
constexpr size_t kChunk = 1 << 20;
// What an image may hold (an image comes from anyone): layers, names, Env.
constexpr size_t kMaxLayers = 128;
constexpr size_t kMaxNames = 64;
constexpr size_t kMaxEnv = 256;
constexpr size_t kMaxEnvBytes = 64 << 10;
// Left free on the store's disk whatever a pull writes.
constexpr uint64_t kDiskReserve = 256ull << 20;

// Bytes free on the filesystem of `path`, less the reserve.
uint64_t free_bytes(const std::string& path) {
  struct statvfs v{};
  if (::statvfs(path.c_str(), &v) != 0) return 0;
  uint64_t free = static_cast<uint64_t>(v.f_bavail) * v.f_frsize;
  return free > kDiskReserve ? free - kDiskReserve : 0;
}

Error mismatch(const std::string& what, const std::string& expected, const std::string& got) {
  return make_error(ErrorCode::kInvalidArgument, what + " does not match its digest: expected " + expected + ", got sha256:" + got,
                    "the image was changed or damaged after it was made; nothing of this pull was kept");
}

}  // namespace

uint64_t ImageRecord::bytes() const {
  uint64_t total = 0;
  for (const auto& l : layers) total += l.bytes;
  return total;
}

json ImageRecord::to_json() const {
  json layer_list = json::array();
  for (const auto& l : layers)
    layer_list.push_back({{"diff_id", "sha256:" + l.diff_id}, {"digest", l.digest}, {"size", l.size}, {"bytes", l.bytes}});
  return {{"id", "sha256:" + id},
          {"names", names},
          {"manifest_digest", manifest_digest},
          {"layers", layer_list},
          {"bytes", bytes()},
          {"config", {{"env", config.env}, {"working_dir", config.working_dir}, {"user", config.user}, {"os", config.os},
                      {"architecture", config.architecture}}},
          {"source", source},
          {"pulled_at", pulled_at}};
}

Result<ImageRecord> ImageRecord::from_json(const json& j) {
  ImageRecord r;
  try {
    r.id = NSBOX_TRY(digest_hex(j.at("id").get<std::string>()));
    r.names = j.value("names", std::vector<std::string>{});
    r.manifest_digest = j.value("manifest_digest", "");
    for (const auto& l : j.at("layers"))
      r.layers.push_back({NSBOX_TRY(digest_hex(l.at("diff_id").get<std::string>())), l.value("digest", ""), l.value("size", uint64_t{0}),
                          l.value("bytes", uint64_t{0})});
    const json& c = j.at("config");
    r.config.env = c.value("env", std::vector<std::string>{});
    r.config.working_dir = c.value("working_dir", "");
    r.config.user = c.value("user", "");
    r.config.os = c.value("os", "");
    r.config.architecture = c.value("architecture", "");
    for (const auto& l : r.layers) r.config.diff_ids.push_back(l.diff_id);
    r.source = j.value("source", "");
    r.pulled_at = j.value("pulled_at", "");
  } catch (const json::exception& e) {
    return fail(make_error(ErrorCode::kInternal, std::string("a malformed image record: ") + e.what()));
  }
  return r;
}

Result<std::string> normalize_name(const std::string& given) {
  std::string name = given;
  if (name.empty() || name.size() > 255) return fail(make_error(ErrorCode::kInvalidArgument, "an image name has 1 to 255 characters"));
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-' || c == '/' || c == ':' ||
          (c >= 'A' && c <= 'Z')))
      return fail(make_error(ErrorCode::kInvalidArgument, "image name '" + given.substr(0, 80) + "' has a character other than letters, "
                                                          "digits and . _ - / :"));
  if (name.starts_with("sha256:") || name.front() == '/' || name.front() == ':' || name.find("//") != std::string::npos)
    return fail(make_error(ErrorCode::kInvalidArgument, "'" + given.substr(0, 80) + "' is not an image name"));
  // A tag is what follows the last ':' after the last '/' ("localhost:5000/x" has none).
  size_t slash = name.rfind('/');
  size_t colon = name.rfind(':');
  if (colon == std::string::npos || (slash != std::string::npos && colon < slash)) name += ":latest";
  // The repository is lowercase; the tag keeps its case.
  colon = name.rfind(':');
  std::string repository = name.substr(0, colon);
  if (repository.size() >= 12 && repository.size() <= 64 && repository.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos)
    return fail(make_error(ErrorCode::kInvalidArgument, "image name '" + given.substr(0, 80) + "' looks like an image id", "name it otherwise"));
  std::transform(name.begin(), name.begin() + static_cast<long>(colon), name.begin(), [](char c) { return std::tolower(c); });
  if (colon + 1 == name.size()) return fail(make_error(ErrorCode::kInvalidArgument, "'" + given.substr(0, 80) + "' has an empty tag"));
  return name;
}

Result<void> ImageStore::prepare_dirs() const {
  NSBOX_CHECK(files::make_dirs(dir_, 0700));
  for (const std::string& d : {dir_ + "/blobs", dir_ + "/blobs/sha256", dir_ + "/layers", dir_ + "/trees", dir_ + "/records",
                               dir_ + "/staging"})
    if (::mkdir(d.c_str(), 0700) != 0 && errno != EEXIST) return fail(sys_error("mkdir " + d));
  return {};
}

Result<std::string> ImageStore::make_owned_dir(const std::string& parent) const {
  std::string path = parent + "/.making-" + sys::random_hex(8);
  if (::mkdir(path.c_str(), 0755) != 0) return fail(sys_error("mkdir " + path));
  if (::geteuid() == 0 && ::chown(path.c_str(), ids_.uid, ids_.gid) != 0) {
    int err = errno;
    ::rmdir(path.c_str());
    return fail(sys_error("chown " + path, err));
  }
  return path;
}

Result<std::string> ImageStore::make_staging() const {
  NSBOX_CHECK(prepare_dirs());
  return make_owned_dir(dir_ + "/staging");
}

Result<void> ImageStore::unpack_archive(const std::string& file, const std::string& dir) const {
  // Bounded by the disk: sparse members counted at their size, as copying them costs.
  const std::string bound = std::to_string(free_bytes(dir));
  NSBOX_CHECK(archive({"extract", "--archive", file, "--dir", dir, "--format", "tar", "--max-members", "1000000", "--max-bytes", bound,
                       "--max-apparent-bytes", bound},
                      "unpack " + file));
  return {};
}

Result<json> ImageStore::archive(std::vector<std::string> argv, const std::string& what) const {
  argv.insert(argv.begin(), archiver_);
  argv.insert(argv.end(), {"--uid", std::to_string(ids_.uid), "--gid", std::to_string(ids_.gid)});
  return run_helper(argv, what, kArchiverTimeoutS);
}

namespace {

// A blob's bytes into the store's blob directory, hashed on the way; its hex digest. The
// bytes checked are the bytes kept: the source may change after, the copy does not.
Result<std::string> copy_blob(int in, const std::string& blobs, uint64_t expected_size, const std::string& what, std::string& temp) {
  struct stat st{};
  if (::fstat(in, &st) != 0 || !S_ISREG(st.st_mode)) return fail(make_error(ErrorCode::kInvalidArgument, what + " is not a regular file"));
  if (expected_size && static_cast<uint64_t>(st.st_size) != expected_size)
    return fail(make_error(ErrorCode::kInvalidArgument, what + " has " + std::to_string(st.st_size) + " bytes; its manifest says " +
                                                            std::to_string(expected_size)));
  if (static_cast<uint64_t>(st.st_size) > free_bytes(blobs))
    return fail(make_error(ErrorCode::kLimitExceeded, what + " has " + format_bytes(static_cast<uint64_t>(st.st_size)) +
                                                          ", more than the store's disk has free", "free some disk space"));
  temp = blobs + "/.making-" + sys::random_hex(8);
  UniqueFd out(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!out) return fail(sys_error("create " + temp));
  Sha256 hash;
  std::vector<char> buf(kChunk);
  for (;;) {
    ssize_t n = sys::retry_eintr([&] { return ::read(in, buf.data(), buf.size()); });
    if (n < 0) return fail(sys_error("read " + what));
    if (n == 0) break;
    std::string_view chunk(buf.data(), static_cast<size_t>(n));
    hash.update(chunk);
    NSBOX_CHECK(files::write_all(out.get(), chunk, temp));
  }
  if (::fsync(out.get()) != 0) return fail(sys_error("fsync " + temp));
  return hash.hex_digest();
}

}  // namespace

Result<ImageRecord> ImageStore::add(const ImportPlan& plan) {
  NSBOX_CHECK(prepare_dirs());
  auto lock = NSBOX_TRY(files::lock_exclusive(dir_ + "/.lock"));  // one pull or removal at a time
  std::vector<std::string> made;  // what this pull added, removed if it fails
  auto added = add_locked(plan, made);
  if (!added)
    for (auto it = made.rbegin(); it != made.rend(); ++it) (void)subids::remove_tree(*it);
  return added;
}

Result<ImageRecord> ImageStore::add_locked(const ImportPlan& plan, std::vector<std::string>& made) {
  ImageRecord record;
  record.id = sha256_hex(plan.config_text);
  record.config = NSBOX_TRY(parse_config(plan.config_text));
  record.source = plan.source;
  record.pulled_at = sys::now_rfc3339();
  if (!plan.manifest_text.empty()) record.manifest_digest = "sha256:" + sha256_hex(plan.manifest_text);
  if (plan.layers.size() > kMaxLayers)
    return fail(make_error(ErrorCode::kLimitExceeded, "the image has " + std::to_string(plan.layers.size()) + " layers, more than " +
                                                          std::to_string(kMaxLayers)));
  if (plan.names.size() > kMaxNames)
    return fail(make_error(ErrorCode::kLimitExceeded, "the image has " + std::to_string(plan.names.size()) + " names, more than " +
                                                          std::to_string(kMaxNames)));
  size_t env_bytes = 0;
  for (const auto& assignment : record.config.env) {
    env_bytes += assignment.size();
    if (!parse_env_assignment(assignment))
      return fail(make_error(ErrorCode::kInvalidArgument, "the image config's Env has an entry that is no NAME=VALUE: '" +
                                                              assignment.substr(0, 80) + "'"));
  }
  if (record.config.env.size() > kMaxEnv || env_bytes > kMaxEnvBytes)
    return fail(make_error(ErrorCode::kLimitExceeded, "the image config's Env is larger than " + std::to_string(kMaxEnv) + " entries or " +
                                                          std::to_string(kMaxEnvBytes >> 10) + " KiB"));
  if (record.config.diff_ids.size() != plan.layers.size())
    return fail(make_error(ErrorCode::kInvalidArgument, "the image config names " + std::to_string(record.config.diff_ids.size()) +
                                                            " layers; its manifest " + std::to_string(plan.layers.size())));
  // The documents, kept as blobs (a later push or save gives them as they were).
  for (const std::string* text : {&plan.config_text, &plan.manifest_text}) {
    if (text->empty()) continue;
    std::string path = blob_path(sha256_hex(*text));
    if (files::exists(path)) continue;
    NSBOX_CHECK(files::atomic_write(path, *text));
    made.push_back(path);
  }
  std::vector<std::string> layer_dirs;
  // A blob named twice in one pull is copied and checked once: a layer repeated 128 times
  // costs one copy and one decompression, not 128.
  std::map<std::pair<dev_t, ino_t>, std::string> copied;  // source file -> its hex
  std::set<std::pair<std::string, std::string>> checked;  // (blob hex, diff_id) verified by this pull
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    const auto& source = plan.layers[i];
    const std::string& diff_id = record.config.diff_ids[i];
    const std::string what = "layer " + std::to_string(i + 1) + " of " + std::to_string(plan.layers.size());
    struct stat src{};
    if (::fstat(source.blob.get(), &src) != 0) return fail(sys_error("stat " + what));
    if (auto seen = copied.find({src.st_dev, src.st_ino}); seen != copied.end() && checked.count({seen->second, diff_id})) {
      if (!source.digest.empty() && "sha256:" + seen->second != source.digest) return fail(mismatch(what, source.digest, seen->second));
      uint64_t bytes = 0;
      for (const auto& earlier : record.layers)
        if (earlier.diff_id == diff_id) bytes = earlier.bytes;
      record.layers.push_back({diff_id, "sha256:" + seen->second, source.size, bytes});
      layer_dirs.push_back(layer_dir(diff_id));
      continue;
    }
    std::string temp;
    auto hex = copy_blob(source.blob.get(), dir_ + "/blobs/sha256", source.size, what, temp);
    if (!temp.empty()) made.push_back(temp);
    if (!hex) return fail(std::move(hex.error()));
    if (!source.digest.empty() && "sha256:" + *hex != source.digest) return fail(mismatch(what, source.digest, *hex));
    std::string blob = blob_path(*hex);
    if (files::exists(blob)) {
      ::unlink(temp.c_str());
    } else {
      if (::rename(temp.c_str(), blob.c_str()) != 0) return fail(sys_error("rename " + temp));
      made.push_back(blob);
    }
    made.erase(std::remove(made.begin(), made.end(), temp), made.end());
    // Its uncompressed bytes against the config's id: unpacked if new, hashed if stored.
    std::string dir = layer_dir(diff_id);
    bool stored = files::exists(dir);
    std::string making;
    if (!stored) {
      making = NSBOX_TRY(make_owned_dir(dir_ + "/layers"));
      made.push_back(making);
    }
    std::vector<std::string> argv = {"layer", "--archive", blob, "--max-bytes", std::to_string(std::min<uint64_t>(64ull << 30, free_bytes(dir_)))};
    if (!stored) argv.insert(argv.end(), {"--dir", making});
    json report = NSBOX_TRY(archive(argv, "unpack " + what));
    std::string got = report.value("sha256", "");
    if (got != diff_id) return fail(mismatch(what + "'s uncompressed content", "sha256:" + diff_id, got));
    if (!stored) {
      if (::rename(making.c_str(), dir.c_str()) != 0) return fail(sys_error("rename " + making));
      made.back() = dir;
    }
    record.layers.push_back({diff_id, "sha256:" + *hex, source.size ? source.size : 0, report.value("bytes", uint64_t{0})});
    layer_dirs.push_back(dir);
    copied[{src.st_dev, src.st_ino}] = *hex;
    checked.insert({*hex, diff_id});
  }
  // The image's root, merged once.
  if (!files::exists(tree(record.id))) {
    std::string making = NSBOX_TRY(make_owned_dir(dir_ + "/trees"));
    made.push_back(making);
    std::vector<std::string> argv = {"merge", "--dir", making};
    for (const auto& d : layer_dirs) argv.insert(argv.end(), {"--layer", d});
    NSBOX_CHECK(archive(argv, "merge the layers of image " + record.id.substr(0, 12)));
    if (::rename(making.c_str(), tree(record.id).c_str()) != 0) return fail(sys_error("rename " + making));
    made.back() = tree(record.id);
  }
  // Its names, taken from any image that had them; the names it had stay.
  auto existing = list();
  if (!existing) return fail(std::move(existing.error()));
  for (auto& other : *existing) {
    if (other.id == record.id) {
      for (const auto& n : other.names)
        if (std::find(plan.names.begin(), plan.names.end(), n) == plan.names.end()) record.names.push_back(n);
      continue;
    }
    size_t before = other.names.size();
    std::erase_if(other.names, [&](const std::string& n) { return std::find(plan.names.begin(), plan.names.end(), n) != plan.names.end(); });
    if (other.names.size() != before) NSBOX_CHECK(files::atomic_write(record_path(other.id), other.to_json().dump() + "\n"));
  }
  record.names.insert(record.names.end(), plan.names.begin(), plan.names.end());
  NSBOX_CHECK(files::atomic_write(record_path(record.id), record.to_json().dump() + "\n"));
  made.clear();  // kept
  return record;
}

Result<std::vector<ImageRecord>> ImageStore::list() const {
  std::vector<ImageRecord> out;
  std::string records = dir_ + "/records";
  if (!files::exists(records)) return out;
  for (const auto& name : NSBOX_TRY(files::list_dir(records))) {
    if (!name.ends_with(".json")) continue;
    // A record that cannot be read is left out (and its image's files collected): one bad
    // record must not take the store down.
    auto text = files::read_file(records + "/" + name, kMaxDocumentBytes);
    if (!text) continue;
    auto j = json::parse(*text, nullptr, false);
    if (j.is_discarded()) continue;
    if (auto r = ImageRecord::from_json(j)) out.push_back(std::move(*r));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.pulled_at > b.pulled_at; });
  return out;
}

Result<ImageRecord> ImageStore::resolve(const std::string& ref) const {
  auto images = NSBOX_TRY(list());
  // Ids and digests first: no name can stand for another image's id (names that look like
  // one are refused, normalize_name).
  std::string hex = ref.starts_with("sha256:") ? ref.substr(7) : ref;
  std::vector<const ImageRecord*> found;
  if (hex.size() >= 12 && hex.size() <= 64 && hex.find_first_not_of("0123456789abcdef") == std::string::npos)
    for (const auto& image : images)
      if (image.id.starts_with(hex) || (ref.starts_with("sha256:") && image.manifest_digest == ref)) found.push_back(&image);
  if (found.size() == 1) return *found.front();
  if (found.size() > 1) return fail(make_error(ErrorCode::kInvalidArgument, "'" + ref + "' names more than one image: give more of the id"));
  auto name = normalize_name(ref);
  for (const auto& image : images)
    for (const auto& n : image.names)
      if (n == ref || (name && n == *name)) return image;
  return fail(make_error(ErrorCode::kNotFound, "no image '" + ref.substr(0, 200) + "' here", "`nsbox image ls` lists them; `nsbox image pull` adds one"));
}

Result<ImageRecord> ImageStore::remove(const std::string& ref) {
  NSBOX_CHECK(prepare_dirs());
  auto lock = NSBOX_TRY(files::lock_exclusive(dir_ + "/.lock"));  // one pull or removal at a time
  ImageRecord image = NSBOX_TRY(resolve(ref));
  if (::unlink(record_path(image.id).c_str()) != 0) return fail(sys_error("remove " + record_path(image.id)));
  NSBOX_CHECK(subids::remove_tree(tree(image.id)));
  NSBOX_CHECK(collect_garbage());
  return image;
}

// Layers and blobs that no image names any more, and what a pull cut short left.
Result<void> ImageStore::collect_garbage() const {
  std::set<std::string> layers, blobs;
  std::set<std::string> trees;
  for (const auto& image : NSBOX_TRY(list())) {
    blobs.insert(image.id);
    trees.insert(image.id);
    if (image.manifest_digest.size() > 7) blobs.insert(image.manifest_digest.substr(7));
    for (const auto& l : image.layers) {
      layers.insert(l.diff_id);
      if (l.digest.size() > 7) blobs.insert(l.digest.substr(7));
    }
  }
  for (const auto& name : NSBOX_TRY(files::list_dir(dir_ + "/layers")))
    if (!layers.count(name)) NSBOX_CHECK(subids::remove_tree(dir_ + "/layers/" + name));
  for (const auto& name : NSBOX_TRY(files::list_dir(dir_ + "/blobs/sha256")))
    if (!blobs.count(name)) NSBOX_CHECK(files::remove_tree(dir_ + "/blobs/sha256/" + name));
  for (const auto& name : NSBOX_TRY(files::list_dir(dir_ + "/trees")))
    if (!trees.count(name)) NSBOX_CHECK(subids::remove_tree(dir_ + "/trees/" + name));
  // A pull unpacks its archive outside the lock: only what a day has not touched is left over.
  const time_t day_ago = ::time(nullptr) - 24 * 3600;
  for (const auto& name : NSBOX_TRY(files::list_dir(dir_ + "/staging"))) {
    struct stat st{};
    std::string path = dir_ + "/staging/" + name;
    if (::lstat(path.c_str(), &st) == 0 && st.st_mtime < day_ago) NSBOX_CHECK(subids::remove_tree(path));
  }
  return {};
}

}  // namespace nsbox::images
