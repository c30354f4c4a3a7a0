#include "runtime/client/snapshot_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>

#include "isolation/sys/files.h"
#include "isolation/sys/program.h"
#include "isolation/sys/rfc3339.h"
#include "isolation/sys/secret.h"
#include "isolation/sys/sha256.h"
#include "isolation/sys/syscall.h"
#include "isolation/subordinate_ids.h"
#include "isolation/userns.h"
#include "mounts/volume_image.h"
#include "runtime/core/command.h"

namespace nsbox {
namespace {

using nlohmann::json;

// Bounds a pack or unpack that hangs; a 4 GiB workspace takes well under a minute.
constexpr double kArchiverTimeoutS = 3600;
constexpr size_t kMaxReport = 64 << 10;
// nsbox's own in /mnt/files: long outputs spilled by commands and cells.
constexpr const char* kOwnFilesDir = ".nsbox";

std::string new_snapshot_id() { return "snp-" + sys::random_hex(8); }

bool is_snapshot_id(const std::string& s) { return s.size() == 20 && s.starts_with("snp-"); }

// The volume as nsbox-archive takes it.
std::vector<std::string> volume_args(const Volume& v) { return {v.image ? "--image" : "--dir", v.path}; }

// What of a sandbox a snapshot may say: its definition without anything secret.
json secret_free_spec(const SandboxRecord& record) {
  const SandboxSpec& r = record.spec;
  json mounts = json::array();
  for (const auto& m : r.mounts) mounts.push_back(m.topology());
  json spec = {{"size", size_tier_name(r.size)}, {"net", r.net.to_json()}, {"mounts", mounts}, {"env_names", r.env_names}};
  if (!r.manifest_digest.empty()) spec["manifest_digest"] = r.manifest_digest;
  return spec;
}

Result<uint64_t> env_number(const char* name, uint64_t fallback) {
  const char* text = std::getenv(name);
  if (!text || !*text) return fallback;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text, &end, 10);
  if (*end != '\0' || v == 0)
    return fail(make_error(ErrorCode::kInvalidArgument, std::string(name) + " must be a positive number, not '" + text + "'"));
  return static_cast<uint64_t>(v);
}

}  // namespace

json SnapshotInfo::to_json() const {
  return {{"id", id},           {"name", name},       {"sandbox", sandbox}, {"created_at", created_at},
          {"include_files", include_files}, {"members", members}, {"bytes", bytes}, {"skipped", skipped},
          {"left_out", left_out},
          {"fingerprint", fingerprint}, {"spec", spec}, {"made_ns", made_ns}};
}

Result<SnapshotInfo> SnapshotInfo::from_json(const json& j, std::string dir) {
  try {
    SnapshotInfo s;
    s.id = j.at("id").get<std::string>();
    s.name = j.value("name", "");
    s.sandbox = j.value("sandbox", "");
    s.created_at = j.value("created_at", "");
    s.include_files = j.value("include_files", false);
    s.members = j.value("members", uint64_t{0});
    s.bytes = j.value("bytes", uint64_t{0});
    s.skipped = j.value("skipped", uint64_t{0});
    s.left_out = j.value("left_out", std::vector<std::string>{});
    s.fingerprint = j.value("fingerprint", "");
    s.spec = j.value("spec", json::object());
    s.made_ns = j.value("made_ns", int64_t{0});
    s.dir = std::move(dir);
    return s;
  } catch (const json::exception& e) {
    return fail(make_error(ErrorCode::kInternal, "corrupt snapshot record in " + dir + ": " + e.what()));
  }
}

Result<SnapshotLimits> SnapshotLimits::from_environment() {
  SnapshotLimits l;
  l.max_members = NSBOX_TRY(env_number("NSBOX_SNAPSHOT_MAX_MEMBERS", l.max_members));
  l.max_bytes = NSBOX_TRY(env_number("NSBOX_SNAPSHOT_MAX_BYTES", l.max_bytes));
  return l;
}

Result<json> SnapshotStore::run_archiver(std::vector<std::string> argv, const std::string& what, int out_fd) const {
  auto limits = NSBOX_TRY(SnapshotLimits::from_environment());
  argv.insert(argv.begin(), archiver_);
  argv.insert(argv.end(), {"--max-members", std::to_string(limits.max_members), "--max-bytes", std::to_string(limits.max_bytes)});
  return run_helper(argv, what, kArchiverTimeoutS, out_fd);
}

Result<SnapshotInfo> SnapshotStore::create(const SandboxRecord& record, const Volume& home, const Volume& files,
                                           const std::string& name, bool include_files,
                                           const std::vector<std::string>& skip_home) const {
  if (!name.empty()) {
    NSBOX_CHECK(StateStore::validate_name(name));
    if (find(name)) return fail(make_error(ErrorCode::kAlreadyExists, "a snapshot named '" + name + "' already exists"));
  }
  NSBOX_CHECK(files::ensure_private_dir(dir_));
  SnapshotInfo s;
  s.id = new_snapshot_id();
  s.name = name;
  s.sandbox = record.id;
  s.created_at = sys::now_rfc3339();
  s.include_files = include_files;
  s.spec = secret_free_spec(record);
  std::string making = dir_ + "/.making-" + s.id + "-" + std::to_string(::getpid());
  if (::mkdir(making.c_str(), 0700) != 0) return fail(sys_error("mkdir " + making));
  auto built = [&]() -> Result<void> {
    auto add = [&](const json& report, const char* root) {
      s.members += report.value("members", uint64_t{0});
      s.bytes += report.value("bytes", uint64_t{0});
      s.skipped += report.value("skipped", uint64_t{0});
      for (const auto& name : report.value("left_out", std::vector<std::string>{})) s.left_out.push_back(root + name);
    };
    json h = NSBOX_TRY(pack(home, making + "/home.tar", skip_home, "snapshot /home/user of " + record.id));
    add(h, "home/");
    std::string digests = h.value("sha256", "") + ":";
    if (include_files) {
      json f = NSBOX_TRY(pack(files, making + "/files.tar", {kOwnFilesDir}, "snapshot /mnt/files of " + record.id));
      add(f, "files/");
      digests += f.value("sha256", "");
    }
    s.fingerprint = sha256_hex(digests + ":" + s.spec.dump());
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    s.made_ns = int64_t(now.tv_sec) * 1000000000 + now.tv_nsec;
    NSBOX_CHECK(files::atomic_write(making + "/snapshot.json",
                                    s.to_json().dump(2, ' ', false, json::error_handler_t::replace) + "\n", 0600));
    if (::rename(making.c_str(), (dir_ + "/" + s.id).c_str()) != 0) return fail(sys_error("rename " + making));
    return {};
  }();
  if (!built) {
    (void)files::remove_tree(making);
    return fail(std::move(built.error()));
  }
  s.dir = dir_ + "/" + s.id;
  if (remote_) {
    // Into the bucket, record last; the staged copy goes either way.
    auto put = run_store({"put", s.id, s.dir}, "store snapshot " + s.id);
    (void)files::remove_tree(s.dir);
    if (!put) {
      (void)run_store({"rm", s.id}, "remove the parts of snapshot " + s.id);
      return fail(std::move(put.error()));
    }
    s.dir.clear();
  }
  return s;
}

Result<json> SnapshotStore::pack(const Volume& volume, const std::string& out, const std::vector<std::string>& skip,
                                 const std::string& what) const {
  std::vector<std::string> argv = {out.empty() ? "digest" : "pack"};
  for (auto& a : volume_args(volume)) argv.push_back(a);
  if (!out.empty()) argv.insert(argv.end(), {"--out", out});
  for (const auto& rel : skip) argv.insert(argv.end(), {"--skip", rel});
  return run_archiver(argv, what);
}

Result<json> SnapshotStore::stream(const Volume& volume, const std::string& subdir, int out_fd, const std::vector<std::string>& skip,
                                   const std::string& what) const {
  std::vector<std::string> argv = {"pack"};
  for (auto& a : volume_args(volume)) argv.push_back(a);
  argv.insert(argv.end(), {"--subdir", subdir, "--out-fd", "3"});
  for (const auto& rel : skip) argv.insert(argv.end(), {"--skip", rel});
  return run_archiver(argv, what, out_fd);
}

Result<std::string> SnapshotStore::fingerprint(const SandboxRecord& record, const Volume& home, const Volume& files,
                                               bool include_files, const std::vector<std::string>& skip_home) const {
  json h = NSBOX_TRY(pack(home, "", skip_home, "fingerprint /home/user of " + record.id));
  std::string digests = h.value("sha256", "") + ":";
  if (include_files) digests += NSBOX_TRY(pack(files, "", {kOwnFilesDir}, "fingerprint /mnt/files of " + record.id)).value("sha256", "");
  return sha256_hex(digests + ":" + secret_free_spec(record).dump());
}

Result<std::vector<SnapshotInfo>> SnapshotStore::list() const {
  std::vector<SnapshotInfo> out;
  if (remote_) {
    json listed = NSBOX_TRY(run_store({"ls"}, "list the snapshots"));
    for (const auto& j : listed.value("snapshots", json::array()))
      if (auto s = SnapshotInfo::from_json(j, "")) out.push_back(std::move(*s));
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
      return a.made_ns != b.made_ns ? a.made_ns < b.made_ns : a.id < b.id;
    });
    return out;
  }
  if (!files::exists(dir_)) return out;
  for (const auto& entry : NSBOX_TRY(files::list_dir(dir_))) {
    if (!is_snapshot_id(entry)) continue;
    std::string dir = dir_ + "/" + entry;
    auto text = files::read_file(dir + "/snapshot.json");
    if (!text) continue;
    auto j = json::parse(*text, nullptr, false);
    auto s = SnapshotInfo::from_json(j, dir);
    if (!s) continue;
    struct stat st{};
    if (s->made_ns == 0 && ::stat((dir + "/snapshot.json").c_str(), &st) == 0)
      s->made_ns = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    out.push_back(std::move(*s));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.made_ns != b.made_ns ? a.made_ns < b.made_ns : a.id < b.id;
  });
  return out;
}

Result<SnapshotInfo> SnapshotStore::find(const std::string& id_or_name) const {
  for (auto& s : NSBOX_TRY(list()))
    if (s.id == id_or_name || (!s.name.empty() && s.name == id_or_name)) return std::move(s);
  return fail(make_error(ErrorCode::kNotFound, "no snapshot '" + id_or_name + "' in " + dir_, "`nsbox snapshot ls` lists them"));
}

Result<void> SnapshotStore::remove(const std::string& id_or_name) const {
  auto s = NSBOX_TRY(find(id_or_name));
  if (!remote_) return files::remove_tree(s.dir);
  NSBOX_CHECK(run_store({"rm", s.id}, "remove snapshot " + s.id));
  return {};
}

Result<SandboxPointer> SnapshotStore::pointer(const std::string& sandbox) const {
  if (!remote_) return fail(make_error(ErrorCode::kUnsupported, "sandbox pointers live in a remote snapshot store (--snapshot-store)"));
  // Asked while a client waits for its answer: bounded well below a transfer's bound.
  json j = NSBOX_TRY(run_store({"where", sandbox}, "find where " + sandbox + " went", 15));
  SandboxPointer p;
  p.sandbox = sandbox;
  p.snapshot = j.value("snapshot", "");
  p.moved = j.value("moved", false);
  p.at = j.value("at", "");
  return p;
}

Result<void> SnapshotStore::mark_moved(const std::string& sandbox, const std::string& snapshot) const {
  if (!remote_) return fail(make_error(ErrorCode::kUnsupported, "a drain's tombstones live in a remote snapshot store (--snapshot-store)"));
  NSBOX_CHECK(run_store({"moved", sandbox, snapshot}, "leave the tombstone of " + sandbox));
  return {};
}

Result<json> SnapshotStore::run_store(const std::vector<std::string>& args, const std::string& what, double timeout_s) const {
  if (timeout_s <= 0) timeout_s = kArchiverTimeoutS;
  std::vector<std::string> argv = {remote_->helper};
  argv.insert(argv.end(), args.begin(), args.end());
  json config = {{"mount", remote_->bucket.to_json()}, {"credentials", remote_->credentials.to_json()}};
  std::string input = config.dump();
  // The helper's proxies and CA bundle are this process's (a store behind a proxy).
  std::vector<std::string> env = {"PATH=/usr/bin:/bin"};
  for (const char* keep : {"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "SSL_CERT_FILE"})
    if (const char* v = std::getenv(keep)) env.push_back(std::string(keep) + "=" + v);
  auto run = sys::run_program(argv, "", env, input, timeout_s, 64 << 20, kMaxReport);
  sys::wipe(input);
  std::string err = run.err;
  while (!err.empty() && err.back() == '\n') err.pop_back();
  if (run.status == -1) return fail(make_error(ErrorCode::kSystem, what + ": could not run " + remote_->helper + ": " + err));
  if (run.timed_out) return fail(make_error(ErrorCode::kTimeout, what + ": took more than " + std::to_string(int(timeout_s)) + " s"));
  if (!WIFEXITED(run.status) || WEXITSTATUS(run.status) != 0)
    return fail(helper_error(what + " (" + remote_->bucket.source() + ")", "nsbox-snapstore", err,
                             WIFEXITED(run.status) ? WEXITSTATUS(run.status) : 1, ErrorCode::kUnavailable));
  return helper_report(what, "nsbox-snapstore", run.out);
}

Result<RemoteSnapshotStore> RemoteSnapshotStore::parse(const std::string& url, const bucket::Environment& env, std::string helper) {
  // A store is a bucket and prefix as a mount names one; its mount path is never used.
  auto mount = bucket::parse_mount_flag(url + ":/snapshot-store");
  if (!mount) {
    return fail(make_error(ErrorCode::kInvalidArgument, "--snapshot-store " + url + " is not a bucket URL",
                           "s3://BUCKET[/PREFIX], r2://BUCKET, gs://BUCKET or azblob://ACCOUNT/CONTAINER"));
  }
  RemoteSnapshotStore r;
  r.bucket = std::move(*mount);
  r.credentials = NSBOX_TRY(bucket::resolve(r.bucket, env));
  r.helper = std::move(helper);
  return r;
}

Result<void> SnapshotStore::restore(const SnapshotInfo& snapshot, const Volume& home, const Volume& files, bool replace) const {
  if (snapshot.include_files && files.named)
    return fail(make_error(ErrorCode::kInvalidArgument,
                           "snapshot " + snapshot.id + " holds /mnt/files: it restores into a sandbox's own files volume, not the named volume '" +
                               files.name + "', which other sandboxes may share",
                           "create a sandbox without --volume from it, or use a snapshot made without --include-files"));
  if (!remote_) return restore_from(snapshot, home, files, replace);
  // Fetched into the directory first: the restore checks every archive before it writes.
  NSBOX_CHECK(files::ensure_private_dir(dir_));
  SnapshotInfo local = snapshot;
  local.dir = dir_ + "/.fetching-" + snapshot.id + "-" + std::to_string(::getpid());
  if (::mkdir(local.dir.c_str(), 0700) != 0) return fail(sys_error("mkdir " + local.dir));
  auto restored = [&]() -> Result<void> {
    // No archive larger than a snapshot may be (its contents, and a header per member).
    auto limits = NSBOX_TRY(SnapshotLimits::from_environment());
    uint64_t max = limits.max_bytes + limits.max_members * 4096;
    NSBOX_CHECK(run_store({"get", snapshot.id, local.dir, std::to_string(max)}, "fetch snapshot " + snapshot.id));
    return restore_from(local, home, files, replace);
  }();
  (void)files::remove_tree(local.dir);
  return restored;
}

namespace {

// A new, empty volume beside `v` (an image of the same size, or a directory), named as
// VolumeStore names what it is making ("<path>.making.<pid>.<tid>"), so that one a crash
// left is removed as theirs are.
Result<Volume> fresh_beside(const Volume& v, const userns::HostIds& ids) {
  Volume fresh = v;
  fresh.path = v.path + ".making." + std::to_string(::getpid()) + "." + std::to_string(::gettid());
  (void)files::remove_tree(fresh.path);  // an earlier attempt of this pid and thread: dead
  if (v.image) NSBOX_CHECK(volume_image::create(fresh.path, v.quota_bytes, ids.uid, ids.gid));
  else if (::mkdir(fresh.path.c_str(), 0700) != 0) return fail(sys_error("mkdir " + fresh.path));
  return fresh;
}

void discard(const Volume& fresh) {
  (void)subids::remove_tree(fresh.path);
  ::unlink((fresh.path + ".lock").c_str());  // volume_image's, made when nsbox-archive attached it
}

// `fresh` takes the place of `v` in one rename; what `v` held goes.
Result<void> swap_in(const Volume& fresh, const Volume& v) {
  if (v.image) {
    if (::rename(fresh.path.c_str(), v.path.c_str()) != 0) return fail(sys_error("rename " + fresh.path + " to " + v.path));
    ::unlink((fresh.path + ".lock").c_str());
    return {};
  }
  if (::renameat2(AT_FDCWD, fresh.path.c_str(), AT_FDCWD, v.path.c_str(), RENAME_EXCHANGE) != 0)
    return fail(sys_error("exchange " + fresh.path + " and " + v.path));
  (void)subids::remove_tree(fresh.path);  // the old content, maybe with accounts' files
  return {};
}

}  // namespace

Result<void> SnapshotStore::restore_from(const SnapshotInfo& snapshot, const Volume& home, const Volume& files, bool replace) const {
  auto ids = userns::host_ids();
  // nsbox-archive reads every archive as the sandbox user, never as root.
  const std::vector<std::string> as = {"--uid", std::to_string(ids.uid), "--gid", std::to_string(ids.gid)};
  // Both archives checked, and their contents measured against the volumes, before either
  // volume is touched.
  std::vector<std::pair<std::string, const Volume*>> parts = {{"home.tar", &home}};
  if (snapshot.include_files) parts.push_back({"files.tar", &files});
  for (const auto& [archive, volume] : parts) {
    std::vector<std::string> argv = {"check", "--archive", snapshot.dir + "/" + archive};
    argv.insert(argv.end(), as.begin(), as.end());
    json checked = NSBOX_TRY(run_archiver(argv, "check " + archive + " of " + snapshot.id));
    uint64_t bytes = checked.value("bytes", uint64_t{0});
    if (volume->quota_bytes && bytes > volume->quota_bytes)
      return fail(make_error(ErrorCode::kLimitExceeded,
                             "snapshot " + snapshot.id + " holds " + format_bytes(bytes) + " in " + archive + ", more than the " +
                                 format_bytes(volume->quota_bytes) + " volume it would go to",
                             archive == "home.tar" ? "create with a larger --home-size" : "create with a larger --files-quota"));
  }
  auto unpack = [&](const Volume& v, const std::string& archive, const std::string& what) -> Result<void> {
    std::vector<std::string> argv = {"unpack"};
    for (auto& a : volume_args(v)) argv.push_back(a);
    argv.insert(argv.end(), {"--archive", snapshot.dir + "/" + archive});
    argv.insert(argv.end(), as.begin(), as.end());
    NSBOX_CHECK(run_archiver(argv, "restore " + what + " from " + snapshot.id));
    return {};
  };
  const std::pair<const char*, const char*> what[] = {{"home.tar", "/home/user"}, {"files.tar", "/mnt/files"}};
  if (!replace) {  // new volumes: a failure removes the sandbox, and them with it
    for (size_t i = 0; i < parts.size(); ++i) NSBOX_CHECK(unpack(*parts[i].second, what[i].first, what[i].second));
    return {};
  }
  // Over a workspace: unpacked beside it, into new volumes of the same size, swapped in
  // only once every archive is: whatever fails on the way (a full disk, a member refused as
  // it is written, a killed archiver) leaves the workspace as it was. The volumes are a
  // stopped sandbox's: nothing has them open.
  std::vector<Volume> made;
  auto unpacked = [&]() -> Result<void> {
    for (size_t i = 0; i < parts.size(); ++i) {
      made.push_back(NSBOX_TRY(fresh_beside(*parts[i].second, ids)));
      NSBOX_CHECK(unpack(made.back(), what[i].first, what[i].second));
    }
    return {};
  }();
  if (!unpacked) {
    for (const auto& fresh : made) discard(fresh);
    return unpacked;
  }
  for (size_t i = 0; i < parts.size(); ++i)
    if (auto swapped = swap_in(made[i], *parts[i].second); !swapped) {
      for (size_t j = i; j < parts.size(); ++j) discard(made[j]);
      return swapped;
    }
  return {};
}

}  // namespace nsbox
