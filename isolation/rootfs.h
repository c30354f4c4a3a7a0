// The sandbox's root filesystem: planned in the parent as a list of steps (pure data,
// unit-tested), built in the child on a fresh tmpfs, then entered with pivot_root.
//
// Built with the new mount API: every host source is cloned with open_tree() before
// anything is mounted, so no later mount can shadow a source; read-only/nosuid/nodev are
// set on each cloned tree recursively with mount_setattr() before it is attached; and the
// targets are paths in our own fresh tmpfs, which holds no symlink an attacker made
// (the CVE-2021-30465 class needs a target path the sandbox can write).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "isolation/cgroup.h"
#include "isolation/size_tier.h"
#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox::rootfs {

enum class StepKind {
  kBindTree,       // clone host `source` (recursive) to `target` with `attrs`
  kSymlink,        // `target` -> `source`
  kTmpfs,          // fresh tmpfs at `target`, mount data in `data`, then `attrs`
  kProc,           // new procfs for the sandbox's pid namespace
  kDevpts,         // new devpts instance (its own ptys, none of the host's)
  kMaskWithNull,   // bind the sandbox's /dev/null over a file
  kMaskDir,        // an empty read-only tmpfs over a directory
  kReadOnlyAgain,  // bind a path onto itself read-only (e.g. /proc/sys)
  kReadOnlyFinal,  // make `target` (already a mount) read-only, after it was filled in
  kDir,            // an empty directory (a mount point for something attached later)
  kOverlay,        // a read-only overlay at `target`: `layer` over host `source`
  kWorkspace,      // the directory `source` (relative, under the tree built at `data`) bound at `target`
  kShared,         // the directory `target` given to kSystemUid, writable by every account, sticky (1777, as /tmp)
  kImageRoot,      // first, or not at all: the root is an overlay of the image tree `source` under a writable layer in `data`
  kFile,           // the sandbox's own file `target` (in an image root's /etc), `data` its content; a link there is replaced
};

// A file of an overlay's own layer.
struct LayerFile {
  std::string name;  // relative to the overlay's root
  std::string data;
};

struct Step {
  StepKind kind;
  std::string source{};
  std::string target{};  // absolute path inside the sandbox
  std::string data{};
  unsigned attrs = 0;  // MOUNT_ATTR_* bits
  bool optional = false;  // the source may be missing on this host
  std::vector<LayerFile> layer{};  // kOverlay: the files that cover the host's
};

// 32 random lowercase hex digits, as systemd writes /etc/machine-id.
std::string random_machine_id();

// Where the home volume is, and where a workspace root outside it lives in it: a root
// under /home/user is that directory of the home; any other is the home's `workspace`.
constexpr const char* kHome = "/home/user";
constexpr const char* kWorkspaceInHome = "workspace";
// The workspace root's directory relative to the home volume ("" for /home/user itself).
std::string workspace_in_home(const std::string& workspace_root);
// A sandbox path under the workspace root or the home, relative to the home volume;
// nullopt for a path elsewhere.
std::optional<std::string> path_in_home(const std::string& path, const std::string& workspace_root);
// Whether `path` can be a workspace root: absolute and plain (names of letters, digits,
// '.', '_', '-'; no '.', '..', '//'), /home/user or under it, or else beneath a top-level
// name the sandbox's own trees do not use (/workspace, /app, /code/project; not /usr,
// /etc, /tmp, /mnt, /opt, /home...). The error names the rule broken.
Result<void> check_workspace_root(const std::string& path);

struct Spec {
  Limits limits;
  std::string files_volume;     // host directory bound read-write at /mnt/files; empty: a tmpfs
  std::string sandbox_libexec;  // host directory bound read-only at /opt/nsbox
  std::vector<cgroup::View> cgroup_views;
  std::string host_root = "/";  // tests plan against a fake host tree
  bool files_attached_later = false;  // /mnt/files is only a mount point (mount_injection.h)
  std::vector<std::string> mount_points;  // empty directories for bucket mounts attached later
  std::string machine_id = random_machine_id();  // the sandbox's own /etc/machine-id
  std::string bridge_dir;  // host directory bound read-only at /run/nsbox (the tool bridge's socket); empty: none
  std::string wheelhouse;  // host directory of wheels bound read-only at /opt/wheelhouse; empty: none
  std::string resolv_conf;  // the sandbox's own /etc/resolv.conf; empty: the host's
  std::string home_volume;  // host directory bound read-write at /home/user; empty: a tmpfs (one-shot)
  // The sandbox's workspace root (runtime/core/workspace_root.h): a directory of the home
  // volume shown at this path; /home/user itself: nothing to do.
  std::string workspace_root = kHome;
  // The accounts the sandbox declares besides `user` (runtime/core/sandbox_accounts.h):
  // their lines of /etc/passwd and /etc/group, and a home each (a tmpfs the account owns,
  // mode 0700). With any, /tmp and /dev/shm belong to kSystemUid (isolation/userns.h): the
  // owner of a sticky directory may remove what is in it, so no account may own one.
  std::string passwd_extra;
  std::string group_extra;
  struct AccountHome {
    std::string path;
    uid_t uid;
  };
  std::vector<AccountHome> account_homes;
  bool accounts = false;
  // The workspace root shared by the accounts (kShared): each may make files there, none
  // may remove another's. Not for a root in /home/user, user's own home, whose dotfiles
  // another account could then plant.
  bool shared_workspace = false;
  // An OCI image's merged tree (runtime/images/image_store.h) as the root, instead of the
  // host's system: an overlay whose writable layer (upper and work directories) is the
  // home volume's kRootLayerInHome directory, masked from the sandbox; the root stays
  // writable (nosuid, nodev), the image never changes. Empty: the host's system, read-only.
  std::string image_tree;
};

// The home volume's directory that holds an image sandbox's writable layer (hidden inside).
constexpr const char* kRootLayerInHome = ".nsbox-root";

std::vector<Step> plan(const Spec& spec);

// The host trees the plan binds, cloned and detached (one fd per step; empty when the
// step binds nothing or its optional source is missing).
using SourceTrees = std::vector<UniqueFd>;

// In the child, first: makes every mount a slave and clones every source. Runs before the
// switch to the sandbox uid, while the child still has its creator's fsuid, so that
// sources under root-only directories (/var/lib/nsbox is 0700) can be reached.
Result<SourceTrees> clone_sources_in_child(const std::vector<Step>& steps);

// Then, as the sandbox user (all capabilities in the new namespaces): builds the plan on a
// tmpfs at `staging`, pivots into it and detaches the old root. Fails closed: any failed
// step aborts the whole build.
Result<void> build_in_child(const std::vector<Step>& steps, SourceTrees& trees, const std::string& staging);

}  // namespace nsbox::rootfs
