// One definition of a sandbox: what a user asked it to be (SandboxSpec), and what its
// supervisor is handed beside it and never writes down (LaunchEnvelope).
//
// The spec has one JSON form, the record's (runtime/core/sandbox_record.h adds the facts
// learned while the sandbox runs): the state store writes it, `inspect` and the API show
// it, the supervisor reads it. A create document (runtime/client/create_options.h) fills
// it from a request, with the same field names; the CLI's create flags are its fields'
// names with '-' for '_'.
//
// A new option is one field here and one line in `spec_fields` (what it is called, whether
// a create document may set it); the CLI's flag table names its flag. Nothing else copies
// fields.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "isolation/size_tier.h"
#include "mounts/bucket/mount_spec.h"
#include "runtime/core/command.h"
#include "runtime/core/net_policy.h"
#include "runtime/core/sandbox_accounts.h"
#include "runtime/core/package_sources.h"
#include "runtime/core/tools_config.h"
#include "runtime/protocol/frame.h"

namespace nsbox {

struct SandboxSpec {
  std::string name;  // may be empty
  SizeTier size = SizeTier::kStandard;
  net::NetPolicy net;  // its allowlist as it is now (`nsbox net` changes it)
  PackageSources packages;  // pip's sources and auto-install (docs/network.md)
  std::vector<std::string> env_names;  // the variables it was made with; their values never leave the envelope
  // Its files volume: a create names a shared one (made if new); empty, the create makes
  // the sandbox its own and puts its name here (runtime/core/volume_store.h).
  std::string volume;
  uint64_t files_quota = 0;  // 0: the default (10 GiB; half the free disk when less than 20 GiB is free)
  uint64_t home_size = 0;    // /home/user's volume; 0: the size tier's (1 GiB per GiB of memory)
  std::string from_snapshot;  // a snapshot's id or name, restored before the first command
  // Buckets mounted as directories, served from the host side; their credentials travel
  // in the envelope.
  std::vector<bucket::BucketMount> mounts;
  ToolsConfig tools;  // the tool bridge (docs/tools.md); its keys travel in the envelope
  std::vector<std::string> ephemeral;  // the manifest's ephemeral paths (under /home/user): never in a snapshot
  std::string manifest_digest;  // sha-256 of the manifest without credentials or env values; empty: none
  // No kernel until the first cell: a sandbox used for commands only costs no Python
  // start and no idle interpreter (docs/semantics.md, "Cells").
  bool lazy_kernel = false;
  // A warm pool's members (api/warm_pool.h): the modules their kernels import before the
  // first cell, and whether that heap is offered to KSM. Set by the server, not a request.
  std::vector<std::string> preload;
  bool memory_merge = false;
  // Its time to live, in seconds from its start (0: none): then its supervisor removes it,
  // whether or not a server runs (docs/semantics.md, "Time to live").
  uint64_t ttl_s = 0;
  // Where the workspace is (docs/semantics.md, "The workspace root"): commands, cells and
  // the manifest's entries start there. Another path than /home/user is a directory of the
  // home volume shown there, so it is kept and snapshotted with the home.
  std::string workspace_root = kDefaultWorkspaceRoot;
  // Accounts besides `user` (runtime/core/sandbox_accounts.h), as "users" and "groups".
  SandboxAccounts accounts;
  // An OCI image whose tree is the sandbox's root (docs/images.md): a create names it (a
  // name, an id, a digest), the record keeps its id; empty: the host's system. Its config's
  // Env comes first in every process's environment (image_env, from the image).
  std::string image;
  std::vector<std::string> image_env;

  // The record's form: every field, under its name.
  protocol::Json to_json() const;
  // From a record (trusted: a malformed one is corrupt, kInternal); absent fields keep
  // their defaults, so records written before a field existed still load.
  static Result<SandboxSpec> from_json(const protocol::Json& j);
};

// Who may set a field: a create document, or only nsbox (the manifest's digest, a warm
// pool's preload: derived or the server's, recorded but never asked for).
enum class SpecFieldOrigin { kRequest, kDerived };
// A size in bytes: a create document may write "10G".
struct ByteCount {};
// A duration in whole seconds, at most kMax (30 days).
struct Seconds {
  static constexpr uint64_t kMax = 30ull * 24 * 3600;
};

// A workspace root: a path isolation/rootfs.h's check_workspace_root admits.
struct WorkspaceRoot {};

// The spec's plain fields (strings, booleans, numbers, lists of strings), one line each:
// the record's JSON and a create document read and write them through this table. The
// others (size, net, packages, mounts, tools, users and groups) have forms of their own, in sandbox_spec.cc
// and create_options.cc.
template <class Spec, class Field>
void spec_fields(Spec& s, Field&& field) {
  using O = SpecFieldOrigin;
  field("name", s.name, O::kRequest);
  field("volume", s.volume, O::kRequest);
  field("files_quota", s.files_quota, O::kRequest, ByteCount{});
  field("home_size", s.home_size, O::kRequest, ByteCount{});
  field("from_snapshot", s.from_snapshot, O::kRequest);
  field("lazy_kernel", s.lazy_kernel, O::kRequest);
  field("ttl_s", s.ttl_s, O::kRequest, Seconds{});
  field("workspace_root", s.workspace_root, O::kRequest, WorkspaceRoot{});
  field("image", s.image, O::kRequest);
  field("image_env", s.image_env, O::kDerived);
  field("env_names", s.env_names, O::kDerived);
  field("ephemeral", s.ephemeral, O::kDerived);
  field("manifest_digest", s.manifest_digest, O::kDerived);
  field("preload", s.preload, O::kDerived);
  field("memory_merge", s.memory_merge, O::kDerived);
}

// Reads the plain fields a create document may set from `j` into `spec`: absent ones are
// left as they are, a field of the wrong type is a malformed request naming it.
Result<void> read_request_fields(const protocol::Json& j, SandboxSpec& spec);
// Whether `key` is one of the plain fields a create document may set.
bool is_request_field(const std::string& key);

// A mount's credentials, for the mount at `mount_path`.
struct MountCredentials {
  std::string mount_path;
  bucket::BucketCredentials credentials;
};

// What a supervisor is handed beside its sandbox's record, on its stdin, and never
// writes to disk: env values and the mounts' credentials may be secrets.
struct LaunchEnvelope {
  EnvList env;  // the spec's env_names with their values
  std::vector<MountCredentials> mount_credentials;  // by mount path; a mount not here is anonymous
  ToolKeys tool_keys;  // handed to the tool bridge when it starts
  // `serve --kernel-zygote`: the zygote's socket, where its kernels come from when they
  // can (docs/kernel-zygote.md); the Runtime's (Runtime::use_kernel_zygote).
  std::string kernel_zygote;
  // Names the egress proxy answers without DNS: tests only (set_launch_hook, runtime/
  // client/runtime.h), to reach their own servers on loopback by a name.
  std::map<std::string, std::string> net_resolve;
  // The host-side network helpers (`--net internet`'s NAT helper, `--net allow=`'s egress
  // proxy) run in this network namespace: tests only (set_launch_hook), so that nothing
  // the sandbox sends, nor the proxy's DNS lookups, can leave the machine.
  std::string helper_netns;

  // The credentials of the mount at `mount_path`; anonymous when none were given.
  bucket::BucketCredentials credentials_for(const std::string& mount_path) const;
  void wipe();  // every secret it holds, once handed on

  protocol::Json to_json() const;
  static Result<LaunchEnvelope> from_json(const protocol::Json& j);
};

// How long a bucket mount's server may take to report (its check of the remote, then
// its mount): the supervisor waits this long for each, and the client for all of them. A
// remote that never answers costs the check three attempts of http::Limits' defaults (under
// 40 s), which this must outlast.
constexpr int kBucketServerReadyMs = 60000;
constexpr int kHelperMountTimeoutMs = 30000;  // rclone or s3fs mounting, after the check

// The most a supervisor's start may take for these mounts, on top of the sandbox's own:
// they start one after another.
int mounts_start_bound_ms(const std::vector<bucket::BucketMount>& mounts);

}  // namespace nsbox
