// Snapshots, the state a resume takes, and resume (docs/semantics.md, "Snapshots" and
// "Resume"): the Runtime's calls on runtime/snapshot/snapshot_store.
#include <algorithm>

#include "runtime/runtime.h"

namespace nsbox {

using protocol::Json;

namespace {

Error invalid(std::string message, std::string hint = {}) {
  return make_error(ErrorCode::kInvalidArgument, std::move(message), std::move(hint));
}

// A mount as a state carries it: no credential, no host path.
Json credential_free(const bucket::BucketMount& m) {
  Json j = m.to_json();
  j.erase("credentials_file");
  return j;
}

Json sorted_by_path(Json mounts) {
  std::sort(mounts.begin(), mounts.end(), [](const Json& a, const Json& b) { return a.value("mount_path", "") < b.value("mount_path", ""); });
  return mounts;
}

// The trusted manifest's mounts against the state's: the same set, field for field.
Result<void> check_topology(const Json& state_mounts, const std::vector<bucket::MountRequest>& trusted) {
  Json given = Json::array();
  for (const auto& r : trusted) given.push_back(credential_free(r.mount));
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
  // Bucket mounts and ephemeral entries are never in a snapshot: those under /home/user
  // are left out by path.
  std::vector<std::string> skip = record.ephemeral;
  const std::string home_prefix = std::string(SandboxFs::kWorkspace) + "/";
  for (const auto& m : record.mounts)
    if (m.mount_path.starts_with(home_prefix)) skip.push_back(m.mount_path.substr(home_prefix.size()));
  return skip;
}

Result<SnapshotInfo> Runtime::snapshot(const std::string& id_or_name, const std::string& name, bool include_files) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  auto record = NSBOX_TRY(store_.load(id));
  if (record.home.empty())
    return fail(invalid("sandbox " + id + " keeps /home/user in memory (made by an older nsbox)",
                        "its /mnt/files can be downloaded with `nsbox files`"));
  auto home = NSBOX_TRY(VolumeStore(store_.root(), VolumeKind::kHome).load(record.home));
  auto files = NSBOX_TRY(VolumeStore(store_.root()).load(record.volume));
  return snapshot_store().create(record, home, files, name, include_files, snapshot_skips(record));
}

Result<std::vector<SnapshotInfo>> Runtime::snapshots() const { return snapshot_store().list(); }

Result<SnapshotInfo> Runtime::find_snapshot(const std::string& id_or_name) const { return snapshot_store().find(id_or_name); }

Result<void> Runtime::remove_snapshot(const std::string& id_or_name) const { return snapshot_store().remove(id_or_name); }

Result<Json> Runtime::extract(const std::string& id_or_name, const std::string& dir, int archive_fd, bool zip,
                              uint64_t max_members, uint64_t max_bytes) const {
  auto fs = NSBOX_TRY(sandbox_fs(id_or_name));
  UniqueFd target = NSBOX_TRY(fs.open_dir(dir));
  auto report = NSBOX_TRY(snapshot_store().extract(archive_fd, target.get(), zip, max_members, max_bytes));
  return Json{{"path", NSBOX_TRY(SandboxFs::normalize(dir))}, {"members", report.value("members", 0)}, {"bytes", report.value("bytes", 0)}};
}

Result<Json> Runtime::state(const std::string& id_or_name) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  auto r = NSBOX_TRY(store_.load(id));
  Json mounts = Json::array();
  for (const auto& m : r.mounts) mounts.push_back(credential_free(m));  // a credentials file is a path on this host
  Json snapshot = nullptr;
  for (const auto& s : NSBOX_TRY(snapshots()))  // oldest first: the last one of this sandbox wins
    if (s.sandbox == id) snapshot = {{"id", s.id}, {"name", s.name}, {"created_at", s.created_at}, {"fingerprint", s.fingerprint},
                                     {"include_files", s.include_files}};
  return Json{{"version", 1},          {"type", "nsbox"},        {"id", r.id},         {"name", r.name},
              {"size", size_tier_name(r.size)}, {"net", r.net.to_json()}, {"env_names", r.env_names}, {"mounts", mounts},
              {"packages", r.packages}, {"tools", r.tools}, {"ephemeral", r.ephemeral}, {"manifest_digest", r.manifest_digest},
              {"snapshot", snapshot}};
}

Result<ResumeResult> Runtime::resume(const Json& state, const ResumeOptions& options) {
  if (!state.is_object() || state.value("type", "") != "nsbox" || state.value("version", 0) != 1 || !state.contains("id") ||
      !state["id"].is_string())
    return fail(invalid("not an nsbox sandbox state", "make one with `nsbox inspect ID --state`"));
  std::string id = state["id"].get<std::string>();
  Json state_mounts = state.value("mounts", Json::array());
  if (!state_mounts.is_array()) return fail(invalid("the state's \"mounts\" is not a list"));
  if (options.trusted_manifest) NSBOX_CHECK(check_topology(state_mounts, options.start.mounts));
  Json snap = state.value("snapshot", Json(nullptr));
  if (!snap.is_null() && (!snap.is_object() || !snap.contains("id") || !snap["id"].is_string()))
    return fail(invalid("the state's \"snapshot\" has no id"));
  ResumeResult result;
  if (!snap.is_null()) result.snapshot = snap["id"].get<std::string>();

  if (store_.resolve(id)) {
    auto info = NSBOX_TRY(info_for(id));
    if (info.status == SandboxStatus::kRunning) {
      result.info = std::move(info);
      result.action = "reattached";
      return result;
    }
    StartOptions start = options.start;
    result.action = "started";
    if (!snap.is_null()) {
      // The workspace as it is now against the snapshot: restored only when they differ.
      SandboxRecord record = info.record;
      if (options.trusted_manifest) record.manifest_digest = options.manifest_digest;
      auto home = NSBOX_TRY(VolumeStore(store_.root(), VolumeKind::kHome).load(record.home));
      auto files = NSBOX_TRY(VolumeStore(store_.root()).load(record.volume));
      std::string live = NSBOX_TRY(snapshot_store().fingerprint(record, home, files, snap.value("include_files", false),
                                                                snapshot_skips(record)));
      if (live != snap.value("fingerprint", "")) {
        start.from_snapshot = NSBOX_TRY(find_snapshot(result.snapshot)).id;
        result.action = "restored";
      }
    }
    result.info = NSBOX_TRY(this->start(id, start));
    return result;
  }

  // Gone: a new sandbox of the state's definition, hydrated from its snapshot.
  if (snap.is_null())
    return fail(make_error(ErrorCode::kNotFound, "sandbox " + id + " is gone and its state names no snapshot to recreate it from",
                           "snapshot sandboxes you mean to resume (`nsbox snapshot create`)"));
  auto snapshot = NSBOX_TRY(find_snapshot(result.snapshot));
  if (!state_mounts.empty() && !options.trusted_manifest)
    return fail(invalid("sandbox " + id + " had bucket mounts: their credentials come again only from a trusted manifest",
                        "pass --manifest FILE with the mounts the sandbox was made with"));
  NSBOX_CHECK(require_env(id, state.value("env_names", std::vector<std::string>{}), options.start.env));
  CreateOptions c;
  c.size = NSBOX_TRY(parse_size_tier(state.value("size", "standard")));
  c.name = state.value("name", "");
  if (!c.name.empty() && store_.resolve(c.name))
    return fail(make_error(ErrorCode::kAlreadyExists, "sandbox " + id + " is gone and another sandbox now has its name '" + c.name + "'"));
  c.net = NSBOX_TRY(net::NetPolicy::from_json(state.value("net", Json("none"))));
  if (auto p = state.value("packages", Json(nullptr)); !p.is_null()) c.packages = NSBOX_TRY(PackageSources::from_json(p));
  if (auto t = state.value("tools", Json(nullptr)); !t.is_null()) {
    c.tools = NSBOX_TRY(ToolsConfig::from_json(t));
    c.tool_keys = NSBOX_TRY(tool_keys_from(c.tools, options.start.environment));
    c.tool_keys.link_key = options.start.link_key;
    c.tool_keys.link_base_url = options.start.link_base_url;
  }
  c.env = options.start.env;
  c.mounts = options.start.mounts;
  c.from_snapshot = snapshot.id;
  c.workspace = options.ephemeral_entries;
  c.ephemeral = options.trusted_manifest ? options.ephemeral : state.value("ephemeral", std::vector<std::string>{});
  c.manifest_digest = options.trusted_manifest ? options.manifest_digest : state.value("manifest_digest", "");
  result.info = NSBOX_TRY(create(c));
  c.tool_keys.wipe();
  result.action = "recreated";
  return result;
}

}  // namespace nsbox
