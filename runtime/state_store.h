// Where sandboxes live on disk and how their records are read and written.
//
//   <run>/sandboxes/<id>/state.json        the record (atomic replace)
//   <run>/sandboxes/<id>/control.sock      the supervisor's socket
//   <run>/sandboxes/<id>/supervisor.lock   flock'd by the supervisor while it lives
//   <run>/sandboxes/<id>/supervisor.log    what the supervisor had to say
//   <run>/names/<name> -> <id>             names, reserved atomically with symlink(2)
//   <run>/cache/                           compiled seccomp program
//   <data>/volumes/                        files volumes (runtime/volume_store.h)
//   <data>/homes/                          home volumes, /home/user (the same)
//
// <run>/<data> are /run/nsbox and /var/lib/nsbox for root; $XDG_RUNTIME_DIR/nsbox and
// $XDG_DATA_HOME/nsbox rootless; DIR/run and DIR/data with --root DIR or NSBOX_ROOT.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "isolation/cgroup.h"
#include "runtime/net/net_policy.h"
#include "isolation/size_tier.h"
#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"
#include "mounts/bucket/mount_spec.h"

namespace nsbox {

struct StateRoot {
  std::string run_dir;
  std::string data_dir;

  static Result<StateRoot> resolve(const std::optional<std::string>& root_override);

  std::string sandbox_dir(const std::string& id) const { return run_dir + "/sandboxes/" + id; }
  std::string state_file(const std::string& id) const { return sandbox_dir(id) + "/state.json"; }
  std::string socket_path(const std::string& id) const { return sandbox_dir(id) + "/control.sock"; }
  std::string lock_file(const std::string& id) const { return sandbox_dir(id) + "/supervisor.lock"; }
  std::string log_file(const std::string& id) const { return sandbox_dir(id) + "/supervisor.log"; }
  std::string names_dir() const { return run_dir + "/names"; }
  std::string cache_dir() const { return run_dir + "/cache"; }
  std::string volume_mount(const std::string& id) const { return sandbox_dir(id) + "/volume"; }
  std::string home_mount(const std::string& id) const { return sandbox_dir(id) + "/home"; }
  // upload_local_file's host copies (runtime/tools/shared_files.h); they go with the sandbox.
  std::string shared_dir(const std::string& id) const { return data_dir + "/shared/" + id; }
  // What the egress proxy refused (runtime/net/egress_proxy.h), one JSON line each.
  std::string net_denials(const std::string& id) const { return sandbox_dir(id) + "/net-denials.log"; }
};

// How the limits of a sandbox are enforced.
enum class Enforcement { kCgroupV1, kCgroupV2, kRlimits };
std::string_view enforcement_name(Enforcement e);

// The durable description of one sandbox. Holds no secret: --env values stay in the
// supervisor's memory; only their names are recorded.
struct SandboxRecord {
  std::string id;
  std::string name;  // may be empty
  SizeTier size = SizeTier::kStandard;
  net::NetPolicy net;  // its allowlist as it is now (`nsbox net` changes it)
  std::string created_at;  // RFC 3339, UTC
  pid_t supervisor_pid = 0;
  pid_t init_pid = 0;
  Enforcement enforcement = Enforcement::kRlimits;
  cgroup::Placement cgroup;
  std::vector<std::string> env_names;
  std::string volume;  // its files volume's name (runtime/volume_store.h)
  std::string home;    // its home volume's name (/home/user); empty: made before homes were kept
  std::string stopped_at;  // RFC 3339, when `nsbox stop` stopped it; empty while it runs
  std::vector<bucket::BucketMount> mounts;  // never their credentials
  std::vector<std::string> ephemeral;  // the manifest's ephemeral paths (under /home/user): not in snapshots
  std::string manifest_digest;  // sha-256 of its manifest without credentials or env values; empty: none
  // The mount paths of those made with credentials (anonymous ones have none): a start
  // without them again is refused rather than mounting anonymously.
  std::vector<std::string> signed_mounts;
  std::vector<pid_t> mount_servers;         // a FUSE server's pid per mount
  nlohmann::json tools;  // the tool bridge's config (runtime/tools/tools_config.h), never a key; null: none
  nlohmann::json packages;  // runtime/packages/package_sources.h; null: none configured
  // The warm pool (docs/semantics.md, "Warm pool"): a member waiting to be claimed names
  // the server that made it ("nsbox-server:<pid>"); empty once claimed, or never pooled.
  std::string pool;
  std::string create_path = "cold";  // "warm": claimed from a pool; "cold": built for its create
  std::vector<std::string> preload;  // modules its kernel imports before its first cell
  bool memory_merge = false;  // its kernels' preloaded heap offered to KSM (`serve --memory-merge`)
  bool lazy_kernel = false;   // its kernel starts at the first cell, not with the sandbox

  nlohmann::json to_json() const;
  static Result<SandboxRecord> from_json(const nlohmann::json& j);
};

// A warm pool's free member is its server's (`owner`) until a create claims it: nothing
// is put in it or taken from it before. The one refusal of the supervisor, the runtime
// and the API.
Error free_member_error(const std::string& id, const std::string& owner);
inline Result<void> require_not_free_member(const SandboxRecord& record) {
  if (record.pool.empty()) return {};
  return fail(free_member_error(record.id, record.pool));
}

// Shards (`nsbox serve --shard`, docs/semantics.md "Sharded serve"): a server's name
// among its peers, [a-z0-9]{1,16}. Ids made under one are "sbx-<shard>-<6 base36>", so
// that any server knows a sandbox's owner from its id; others are "sbx-<6 base36>".
Result<void> validate_shard(const std::string& shard);
// The shard an id names; "" for an id made without one (or not an id).
std::string shard_of_id(const std::string& id);

class StateStore {
 public:
  explicit StateStore(StateRoot root, std::string shard = "") : root_(std::move(root)), shard_(std::move(shard)) {}
  const StateRoot& root() const { return root_; }
  const std::string& shard() const { return shard_; }

  Result<void> ensure_dirs() const;
  std::string new_id() const;  // "sbx-" [shard "-"] 6 base36 characters

  // Names: [a-z0-9][a-z0-9_.-]{0,62}; unique among live sandboxes of this root.
  static Result<void> validate_name(const std::string& name);
  Result<void> reserve_name(const std::string& name, const std::string& id) const;
  void release_name(const std::string& name, const std::string& id) const;

  // An id, or a name that maps to one; kNotFound otherwise.
  Result<std::string> resolve(const std::string& id_or_name) const;
  Result<SandboxRecord> load(const std::string& id) const;
  Result<void> save(const SandboxRecord& record) const;
  Result<std::vector<std::string>> ids() const;

  // True while the sandbox's supervisor holds its lock.
  bool supervisor_alive(const std::string& id) const;
  // Takes the supervisor lock (non-blocking): the caller is now the only one acting on
  // the sandbox. kBusy if a live supervisor or another command holds it.
  Result<UniqueFd> lock_sandbox(const std::string& id) const;

 private:
  StateRoot root_;
  std::string shard_;
};

}  // namespace nsbox
