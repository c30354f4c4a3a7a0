// What a new sandbox is made of: its create document.
//
// The CLI turns its flags into this document, `nsbox serve` reads it from a request body,
// the Python client writes it: a field is parsed in one place (docs/api.md, "Sandboxes").
// Its plain fields are the spec's (runtime/core/sandbox_spec.h), by the same names; the
// rest are a request's forms of the spec's: env with values, mounts with credentials, a
// manifest.
//
//   {"size": "large", "name": "etl", "env": {"K": "V"}, "net": "none", "volume": "memory",
//    "files_quota": "10G" | 10737418240, "home_size": "2G" | 2147483648,
//    "mounts": ["s3://bucket/prefix:/data:rw", {manifest entry..., "credentials": {...}}],
//    "manifest": {"version": 1, "environment": {...}, "entries": {"notes/a.md": {"type": "file", "content": "..."}}},
//    "local_sources": {"base": DIR, "grants": [DIR]},   (the nsbox command's: runtime/client/manifest.h)
//    "tools": {"backend": "dir", "tools_dir": "/srv/tools", ...},   (runtime/core/tools_config.h)
//    "lazy_kernel": true}
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "mounts/bucket/mount_spec.h"
#include "runtime/client/manifest.h"
#include "runtime/core/command.h"
#include "runtime/core/sandbox_spec.h"
#include "runtime/protocol/frame.h"

namespace nsbox {

// A create: the sandbox's spec, the secrets its supervisor is handed beside it, and the
// manifest's entries, written into it once it runs.
struct CreateOptions {
  SandboxSpec spec;
  LaunchEnvelope launch;  // env values, the mounts' credentials, the tool bridge's keys
  std::vector<WorkspaceEntry> workspace;  // the manifest's entries, parents before children
  // A warm pool's member (api/warm_pool.h): the pool's owner, who alone may claim it. Not
  // part of a create document.
  std::string pool;
};

// Where a create document comes from: a local user's own command, or a remote caller.
enum class Caller {
  kLocal,   // the nsbox command: a mount may name a credentials file on this host
  kRemote,  // an API request: no host path may be named (the server would read it for them)
};

// Parses and checks a create document. Mounts without `credentials` take theirs from
// `env` (the caller's environment: `nsbox create`'s, or the server's), and so do the
// tool bridge's keys. A remote caller may name host files for the tools (a tools
// directory, a recording) only under the server's NSBOX_TOOLS_ROOT.
Result<CreateOptions> create_options_from_json(const protocol::Json& j, const bucket::Environment& env, Caller caller);

// What `start` takes again because it was never stored (docs/semantics.md, "Stop and
// start"): env values, the mounts' credentials and the tool bridge's keys.
//   {"env": {"K": "V"}, "from_snapshot": "snp-..."}
// Credentials come from `env` (the caller's environment) as at create; every variable the
// sandbox was created with must be given again.
struct StartOptions {
  EnvList env;
  bucket::Environment environment;  // where the mounts' credentials and the tools' keys are found
  // A server's signed links for upload_local_file (api/), as at create; empty: none.
  std::string link_key;
  std::string link_base_url;
  std::string from_snapshot;  // replaces /home/user (and /mnt/files if it holds them) first
  // Credentials for the sandbox's mounts from a trusted manifest (`resume --manifest`),
  // matched by mount path; a mount not here finds its credentials in `environment`.
  std::vector<bucket::MountRequest> mounts;
};
Result<StartOptions> start_options_from_json(const protocol::Json& j, const bucket::Environment& env);
// Every variable named in `names` (those sandbox `id` was created with) is in `env`; the
// error names the missing ones.
Result<void> require_env(const std::string& id, const std::vector<std::string>& names, const EnvList& env);
// The tool bridge's keys for `tools`, from `env` or the NSBOX_TOOLS_CONFIG file it names.
Result<ToolKeys> tool_keys_from(ToolsConfig& tools, const bucket::Environment& env);

// The process's own environment, as bucket::resolve takes it.
bucket::Environment process_environment();

}  // namespace nsbox
