// A manifest: what a new sandbox's workspace starts with, in the Agents SDK's shape
// (docs/semantics.md, "Manifests").
//
//   {"version": 1, "root": "/home/user", "environment": {"K": "V" | {"value": "V", ...}},
//    "entries": {"rel/path": ENTRY}, "users": [...], "groups": [...]}
//
// (users and groups as runtime/core/sandbox_accounts.h reads them).
//
// ENTRY is {"type": T, "description", "ephemeral", "permissions" | "mode", ...} with T one of
//   file        "content" (text) or "content_b64"
//   dir         "children": {"rel": ENTRY}
//   local_file  "src": a file on the host          (local callers only: the nsbox command)
//   local_dir   "src": a directory on the host     (local callers only)
//   git_repo    "repo", "ref", "subpath", "host"   (local callers only)
//   s3 | r2 | gcs | azure_blob   a bucket mount (mounts/bucket/mount_spec.h), ephemeral
//
// Parsing checks the whole manifest and touches nothing: every key relative and inside
// the root, no path given twice, every host source inside the manifest's base directory
// or a granted one. What is read from the host is read later (runtime/client/workspace_sources.h).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "runtime/core/command.h"
#include "runtime/core/sandbox_accounts.h"
#include "runtime/protocol/frame.h"

namespace nsbox {

// A file or directory made in /home/user before the sandbox is handed over.
struct WorkspaceEntry {
  enum class Kind { kFile, kDir, kLocalFile, kLocalDir, kGitRepo };
  std::string path;  // relative to /home/user, normalised, no `..`
  Kind kind = Kind::kFile;
  std::string content;  // bytes of a file
  mode_t mode = 0755;   // the SDK's default, for files too
  bool ephemeral = false;  // never in a snapshot
  // local_file / local_dir: the host path, absolute and lexically inside a base or grant.
  // git_repo: the repository (a URL, or an absolute host path like a local_dir's).
  std::string source;
  std::string ref;      // git_repo: a branch, tag or commit; empty: the remote's HEAD
  std::string subpath;  // git_repo: the part of the repository copied; empty: all of it
};

// Where host sources may come from: the manifest file's own directory and any granted
// with --local-grant. Empty for a remote caller, who may name no host path.
struct LocalSourceRoots {
  std::string base;  // relative `src` resolve against it
  std::vector<std::string> grants;
  bool allowed() const { return !base.empty(); }
};

struct Manifest {
  std::string root;  // its "root", else the default it was parsed with: where its paths are
  std::vector<WorkspaceEntry> entries;  // parents before children
  EnvList environment;
  // Bucket mount entries as mount documents (mount_path filled in, ephemeral), for
  // create_options to resolve with their credentials.
  std::vector<protocol::Json> mounts;
  SandboxAccounts accounts;  // its "users" and "groups"
  // sha-256 of the manifest without its mounts' credentials and env values: what a
  // snapshot's fingerprint covers of it (a resume with another manifest restores).
  std::string digest;

  // The paths (relative to the root) a snapshot leaves out: ephemeral entries.
  std::vector<std::string> ephemeral_paths() const;
};

// True for the v1 form (an object with "version" or "entries"); the older form of a
// manifest file is {"mounts": [...]} or a list of mounts.
bool is_manifest_v1(const protocol::Json& j);

// `default_root`: where its paths are when it names no "root" (the sandbox's workspace
// root); a "root" it names must be one (isolation/rootfs.h, check_workspace_root).
Result<Manifest> parse_manifest_v1(const protocol::Json& j, const LocalSourceRoots& roots,
                                   const std::string& default_root = kDefaultWorkspaceRoot);

}  // namespace nsbox
