// Where sandboxes live on disk and how their records are read and written.
//
//   <run>/sandboxes/<id>/state.json        the record (atomic replace)
//   <run>/sandboxes/<id>/control.sock      the supervisor's socket
//   <run>/sandboxes/<id>/supervisor.lock   flock'd by the supervisor while it lives
//   <run>/sandboxes/<id>/supervisor.log    what the supervisor had to say
//   <run>/names/<name> -> <id>             names, reserved atomically with symlink(2)
//   <run>/cache/                           compiled seccomp program
//   <data>/volumes/                        files volumes (runtime/core/volume_store.h)
//   <data>/homes/                          home volumes, /home/user (the same)
//
// <run>/<data> are /run/nsbox and /var/lib/nsbox for root; $XDG_RUNTIME_DIR/nsbox and
// $XDG_DATA_HOME/nsbox rootless; DIR/run and DIR/data with --root DIR or NSBOX_ROOT.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"
#include "runtime/core/sandbox_record.h"

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
  // upload_local_file's host copies (runtime/toolbridge/shared_files.h); they go with the sandbox.
  std::string shared_dir(const std::string& id) const { return data_dir + "/shared/" + id; }
  // What the egress proxy refused (runtime/netproxy/egress_proxy.h), one JSON line each.
  std::string net_denials(const std::string& id) const { return sandbox_dir(id) + "/net-denials.log"; }
};

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
