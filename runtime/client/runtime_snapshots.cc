// Snapshots, the state a resume takes, and resume (docs/semantics.md, "Snapshots" and
// "Resume"): the Runtime's calls on runtime/snapshot/snapshot_store.
#include <algorithm>
#include <cstdint>

#include "isolation/rootfs.h"
#include "isolation/sys/syscall.h"
#include "runtime/client/runtime.h"
#include "runtime/client/workspace_sources.h"

namespace nsbox {

using protocol::Json;

namespace {

Error invalid(std::string message, std::string hint = {}) {
  return make_error(ErrorCode::kInvalidArgument, std::move(message), std::move(hint));
}

Json sorted_by_path(Json mounts) {
  std::sort(mounts.begin(), mounts.end(), [](const Json& a, const Json& b) { return a.value("mount_path", "") < b.value("mount_path", ""); });
  return mounts;
}

// The trusted manifest's mounts against the state's: the same set, field for field.
Result<void> check_topology(const Json& state_mounts, const std::vector<bucket::MountRequest>& trusted) {
  Json given = Json::array();
  for (const auto& r : trusted) given.push_back(r.mount.topology());
  Json want = sorted_by_path(state_mounts);
  given = sorted_by_path(std::move(given));
  if (want == given) return {};
  std::string difference;
  for (size_t i = 0; i < std::max(want.size(), given.size()) && difference.empty(); ++i) {
    if (i >= want.size()) difference = "the manifest adds a mount at " + given[i].value("mount_path", "?");
    else if (i >= given.size()) difference = "the manifest has no mount at " + want[i].value("mount_path", "?");
    else if (want[i] != given[i]) {
      for (const auto& [k, v] : want[i].items())
        if (difference.empty() && (!given[i].contains(k) || given[i][k] != v))
          difference = "the mount at " + want[i].value("mount_path", "?") + " differs in " + k;
      if (difference.empty()) difference = "the mount at " + given[i].value("mount_path", "?") + " differs";
    }
  }
  return fail(make_error(ErrorCode::kInvalidArgument,
                         "mount credentials are re-bound only from a trusted manifest whose credential-free mount topology is "
                         "the state's exactly: " + difference,
                         "give the manifest the sandbox was made with (credentials may differ; nothing else)"));
}

}  // namespace

Json ResumeResult::to_json() const {
  Json j = info.to_json();
  j["action"] = action;
  j["snapshot"] = snapshot.empty() ? Json(nullptr) : Json(snapshot);
  return j;
}

std::vector<std::string> Runtime::snapshot_skips(const SandboxRecord& record) {
  // Bucket mounts and ephemeral entries are never in a snapshot: those in the home
  // volume (the workspace's included) are left out by their path in it.
  const std::string& workspace = record.spec.workspace_root;
  std::vector<std::string> skip;
  for (const auto& e : record.spec.ephemeral)
    if (auto in_home = rootfs::path_in_home(workspace + "/" + e, workspace)) skip.push_back(*in_home);
  for (const auto& m : record.spec.mounts)
    if (auto in_home = rootfs::path_in_home(m.mount_path, workspace); in_home && !in_home->empty()) skip.push_back(*in_home);
  // An image sandbox's writable root layer: kept across stop and start, not in a snapshot
  // yet (a tar keeps neither its whiteouts nor the overlay's xattrs; docs/images.md).
  if (!record.spec.image.empty()) skip.push_back(rootfs::kRootLayerInHome);
  return skip;
}

Result<SnapshotInfo> Runtime::snapshot(const std::string& id_or_name, const std::string& name, bool include_files) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  auto record = NSBOX_TRY(store_.load(id));
  NSBOX_CHECK(require_not_free_member(record));
  if (record.facts.home.empty())
    return fail(invalid("sandbox " + id + " keeps /home/user in memory (made by an older nsbox)",
                        "its /mnt/files can be downloaded with `nsbox files`"));
  auto home = NSBOX_TRY(VolumeStore(store_.root(), VolumeKind::kHome).load(record.facts.home));
  auto files = NSBOX_TRY(VolumeStore(store_.root()).load(record.spec.volume));
  return snapshot_store().create(record, home, files, name, include_files, snapshot_skips(record));
}

Result<std::vector<SnapshotInfo>> Runtime::snapshots() const { return snapshot_store().list(); }

Result<SnapshotInfo> Runtime::find_snapshot(const std::string& id_or_name) const { return snapshot_store().find(id_or_name); }

Result<void> Runtime::remove_snapshot(const std::string& id_or_name) const { return snapshot_store().remove(id_or_name); }

Result<Json> Runtime::extract(const std::string& id_or_name, const std::string& dir, int archive_fd, bool zip,
                              uint64_t max_members, uint64_t max_bytes, bool replace, const std::string& run_as) const {
  // The archive is staged in the sandbox's /tmp and unpacked by nsbox-archive *inside* the
  // sandbox, as its user, in its namespaces: whatever its members say and whatever the
  // sandbox's code swaps for a symlink meanwhile, nothing outside its own view is
  // reachable (run on the host, a race on a directory could lead the writes out).
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  // nsbox-archive is linked against the host's libarchive: in an image's root it would
  // load the image's libraries (or find none).
  if (auto record = store_.load(id); record && !record->spec.image.empty())
    return fail(make_error(ErrorCode::kUnsupported, "archives are not unpacked in a sandbox made from an image yet (sandbox " + id + ")",
                           "upload the files one by one, or unpack with a tool of the image's (tar) in a command"));
  auto fs = NSBOX_TRY(sandbox_fs(id, run_as));
  std::string target = NSBOX_TRY(fs.path_of(dir));
  NSBOX_CHECK(fs.make_dir(target, true));
  auto limits = NSBOX_TRY(SnapshotLimits::from_environment());
  std::string staged = "/tmp/.nsbox-extract-" + sys::random_hex(8);
  // Bounded by the sandbox's /tmp, as anything it holds.
  NSBOX_CHECK_CTX(fs.write(staged, archive_fd, UINT64_MAX, 0600), "stage the archive in the sandbox");
  CommandRequest unpack;
  unpack.argv = {"/opt/nsbox/nsbox-archive", "extract", "--archive", staged, "--dir", target, "--format", zip ? "zip" : "tar",
                 "--max-members", std::to_string(std::min(limits.max_members, max_members)),
                 "--max-bytes", std::to_string(std::min(limits.max_bytes, max_bytes))};
  if (replace) unpack.argv.insert(unpack.argv.end(), {"--replace", "yes"});
  unpack.cwd = "/";
  unpack.run_as = run_as;
  unpack.timeout_s = 600;
  auto ran = exec(id, unpack, {});
  (void)fs.remove(staged, false);
  if (!ran) return fail(std::move(ran.error()).context("extract into " + target));
  const std::string what = "extract into " + target;
  if (ran->status != "ok") {
    std::string err = ran->raw.value("stderr", "");
    if (err.empty()) err = ran->message;  // a deadline or a kill says so in the result's message
    return fail(helper_error(what, "nsbox-archive", err, ran->exit_code, ErrorCode::kSystem));
  }
  Json report = NSBOX_TRY(helper_report(what, "nsbox-archive", ran->raw.value("stdout", "")));
  return Json{{"path", target}, {"members", report.value("members", Json(0))}, {"bytes", report.value("bytes", Json(0))}};
}

Result<Json> Runtime::workspace_archive(const std::string& id_or_name, int out_fd) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  auto record = NSBOX_TRY(store_.load(id));
  NSBOX_CHECK(require_not_free_member(record));
  if (record.facts.home.empty())
    return fail(invalid("sandbox " + id + " keeps /home/user in memory (made by an older nsbox)"));
  auto home = NSBOX_TRY(VolumeStore(store_.root(), VolumeKind::kHome).load(record.facts.home));
  // What a snapshot leaves out of the home, as paths under the workspace's directory.
  const std::string in_home = rootfs::workspace_in_home(record.spec.workspace_root);
  std::vector<std::string> skip;
  for (const auto& rel : snapshot_skips(record)) {
    if (in_home.empty()) skip.push_back(rel);
    else if (rel.starts_with(in_home + "/")) skip.push_back(rel.substr(in_home.size() + 1));
  }
  Json report = NSBOX_TRY(snapshot_store().stream(home, in_home, out_fd, skip, "pack the workspace of " + id));
  return Json{{"members", report.value("members", Json(0))}, {"bytes", report.value("bytes", Json(0))},
              {"skipped", report.value("skipped", Json(0))}, {"left_out", report.value("left_out", Json::array())}};
}

Result<Json> Runtime::replace_workspace(const std::string& id_or_name, int archive_fd) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  auto record = NSBOX_TRY(store_.load(id));
  auto limits = NSBOX_TRY(SnapshotLimits::from_environment());
  return extract(id, record.spec.workspace_root, archive_fd, false, limits.max_members, limits.max_bytes, /*replace=*/true);
}

Result<Json> Runtime::state(const std::string& id_or_name) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  auto record = NSBOX_TRY(store_.load(id));
  const SandboxSpec& r = record.spec;
  Json mounts = Json::array();
  for (const auto& m : r.mounts) mounts.push_back(m.topology());  // a credentials file is a path on this host
  Json snapshot = nullptr;
  for (const auto& s : NSBOX_TRY(snapshots()))  // oldest first: the last one of this sandbox wins
    if (s.sandbox == id) snapshot = {{"id", s.id}, {"name", s.name}, {"created_at", s.created_at}, {"fingerprint", s.fingerprint},
                                     {"include_files", s.include_files}};
  // The tool bridge's and pip's host paths are not the state's to carry (a resume does not
  // bring either back: it says so).
  Json spec = r.to_json();
  Json tools = spec["tools"], packages = spec["packages"];
  for (const char* path : {"tools_dir", "replay_file", "record_file"})
    if (tools.is_object()) tools.erase(path);
  if (packages.is_object()) packages.erase("wheelhouse");
  return Json{{"version", 1},          {"type", "nsbox"},        {"id", id},         {"name", r.name},
              {"size", size_tier_name(r.size)}, {"net", r.net.to_json()}, {"env_names", r.env_names}, {"mounts", mounts},
              {"packages", packages}, {"tools", tools}, {"ephemeral", r.ephemeral}, {"manifest_digest", r.manifest_digest},
              {"snapshot", snapshot}};
}

Result<ResumeResult> Runtime::resume(const Json& state, const ResumeOptions& options) {
  // A state is the caller's file (perhaps kept by an agent framework for days): every
  // field is checked for its type, and what it could use against the host is not taken
  // from it (docs/design.md, "Manifests and resume").
  try {
    return resume_checked(state, options);
  } catch (const Json::exception& e) {
    return fail(invalid(std::string("the state has a field of the wrong type: ") + e.what(),
                        "make one with `nsbox inspect ID --state`"));
  }
}

Result<ResumeResult> Runtime::resume_checked(const Json& state, const ResumeOptions& options) {
  if (!state.is_object() || state.value("type", "") != "nsbox" || state.value("version", 0) != 1 || !state.contains("id") ||
      !state["id"].is_string())
    return fail(invalid("not an nsbox sandbox state", "make one with `nsbox inspect ID --state`"));
  std::string id = state["id"].get<std::string>();
  Json state_mounts = state.value("mounts", Json::array());
  if (!state_mounts.is_array()) return fail(invalid("the state's \"mounts\" is not a list"));
  for (const auto& m : state_mounts)
    if (!m.is_object()) return fail(invalid("the state's \"mounts\" holds something other than mounts"));
  if (options.trusted_manifest) NSBOX_CHECK(check_topology(state_mounts, options.start.mounts));
  Json snap = state.value("snapshot", Json(nullptr));
  if (!snap.is_null() && (!snap.is_object() || !snap.contains("id") || !snap["id"].is_string()))
    return fail(invalid("the state's \"snapshot\" has no id"));
  ResumeResult result;
  std::optional<SnapshotInfo> snapshot;
  if (!snap.is_null()) {
    // Only a snapshot of this very sandbox: a state naming another's would hand its
    // workspace over.
    result.snapshot = snap["id"].get<std::string>();
    snapshot = NSBOX_TRY(find_snapshot(result.snapshot));
    if (snapshot->sandbox != id)
      return fail(invalid("snapshot " + snapshot->id + " is of sandbox " + snapshot->sandbox + ", not of " + id));
  }

  if (store_.resolve(id)) {
    auto info = NSBOX_TRY(info_for(id));
    if (info.status == SandboxStatus::kRunning) {
      result.info = std::move(info);
      result.action = "reattached";
      return result;
    }
    // The credentials go to the sandbox's own mounts: the trusted manifest must match
    // those, not only the state (which may say anything).
    if (options.trusted_manifest) {
      Json recorded = Json::array();
      for (const auto& m : info.record.spec.mounts) recorded.push_back(m.topology());
      NSBOX_CHECK(check_topology(recorded, options.start.mounts));
    }
    StartOptions start = options.start;
    result.action = "started";
    if (snapshot) {
      // The workspace as it is now against the snapshot: restored only when they differ.
      SandboxRecord record = info.record;
      if (options.trusted_manifest) record.spec.manifest_digest = options.manifest_digest;
      auto home = NSBOX_TRY(VolumeStore(store_.root(), VolumeKind::kHome).load(record.facts.home));
      auto files = NSBOX_TRY(VolumeStore(store_.root()).load(record.spec.volume));
      std::string live = NSBOX_TRY(snapshot_store().fingerprint(record, home, files, snapshot->include_files, snapshot_skips(record)));
      if (live != snapshot->fingerprint) {
        start.from_snapshot = snapshot->id;
        result.action = "restored";
      }
    }
    result.info = NSBOX_TRY(this->start(id, start));
    // A restore replaced the home: the trusted manifest's ephemeral entries come again.
    if (result.action == "restored" && !options.ephemeral_entries.empty()) {
      auto sources = NSBOX_TRY(WorkspaceSources::prepare(options.ephemeral_entries, store_.root().cache_dir()));
      NSBOX_CHECK(write_workspace(id, options.ephemeral_entries, sources));
    }
    return result;
  }

  // Gone: a new sandbox of the state's definition, hydrated from its snapshot.
  if (!snapshot)
    return fail(make_error(ErrorCode::kNotFound, "sandbox " + id + " is gone and its state names no snapshot to recreate it from",
                           "snapshot sandboxes you mean to resume (`nsbox snapshot create`)"));
  if (!state_mounts.empty() && !options.trusted_manifest)
    return fail(invalid("sandbox " + id + " had bucket mounts: their credentials come again only from a trusted manifest",
                        "pass --manifest FILE with the mounts the sandbox was made with"));
  // What would reach the host is not taken from a state: the tool bridge runs programs and
  // sends keys where its config says, a wheelhouse is a host directory, `host` is no
  // isolation. Such a sandbox is made again by hand.
  auto by_hand = [&](const std::string& what) {
    return fail(invalid("sandbox " + id + " had " + what + ", which a state does not bring back",
                        "make it again: `nsbox create --from-snapshot " + snapshot->id + "` with its flags"));
  };
  if (!state.value("tools", Json(nullptr)).is_null()) return by_hand("a tool bridge");
  if (!state.value("packages", Json(nullptr)).is_null()) return by_hand("package sources");
  CreateOptions c;
  SandboxSpec& spec = c.spec;
  spec.net = NSBOX_TRY(net::NetPolicy::from_json(state.value("net", Json("none"))));
  if (spec.net.mode == network::Mode::kHost) return by_hand("the host's network");
  NSBOX_CHECK(require_env(id, state.value("env_names", std::vector<std::string>{}), options.start.env));
  spec.size = NSBOX_TRY(parse_size_tier(state.value("size", "standard")));
  spec.name = state.value("name", "");
  if (!spec.name.empty() && store_.resolve(spec.name))
    return fail(make_error(ErrorCode::kAlreadyExists, "sandbox " + id + " is gone and another sandbox now has its name '" + spec.name + "'"));
  c.launch.env = options.start.env;
  for (const auto& m : options.start.mounts) {
    spec.mounts.push_back(m.mount);
    c.launch.mount_credentials.push_back({m.mount.mount_path, m.credentials});
  }
  spec.from_snapshot = snapshot->id;
  c.workspace = options.ephemeral_entries;
  spec.ephemeral = options.trusted_manifest ? options.ephemeral : state.value("ephemeral", std::vector<std::string>{});
  for (const auto& p : spec.ephemeral)  // paths the snapshot leaves out: relative, inside the home
    if (p.empty() || p.front() == '/' || p.find("..") != std::string::npos)
      return fail(invalid("the state's ephemeral path '" + p + "' is not inside /home/user"));
  spec.manifest_digest = options.trusted_manifest ? options.manifest_digest : state.value("manifest_digest", "");
  auto made = create(c);
  c.launch.wipe();
  result.info = NSBOX_TRY(std::move(made));
  result.action = "recreated";
  return result;
}

}  // namespace nsbox
