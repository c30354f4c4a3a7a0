// Attaching a mount to a sandbox that is already running.
//
// The sandbox's mounts are private (nothing propagates in), so a mount made later on the
// host side — a files volume prepared while the kernel boots, a bucket served by a FUSE
// server in the supervisor — is cloned here (open_tree), and a short-lived child (sharing
// our memory, as a vfork) enters the sandbox's mount namespace (setns) and attaches the
// clone at the target (move_mount). The caller's own namespaces are untouched.
#pragma once

#include <sys/types.h>

#include <string>

#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox::mount_injection {

// Clones the tree at `source` (a path in the caller's mount namespace), sets `attrs`
// (MOUNT_ATTR_*) on it, and attaches it at `target` (an existing directory, absolute in
// the sandbox) in the mount namespace of `sandbox_pid`.
Result<void> inject(const std::string& source, pid_t sandbox_pid, const std::string& target, unsigned attrs);

struct FuseMount {
  std::string source;  // what the sandbox's /proc/mounts shows: "nsbox-bucket:photos"
  std::string target;  // absolute in the sandbox, an existing directory
  bool read_only = false;
  uid_t uid = 0;  // the owner the mount's root shows, an id of the sandbox's user namespace
  gid_t gid = 0;
};

// Mounts a new FUSE filesystem at `mount.target` from inside the sandbox's user and mount
// namespaces, and returns its /dev/fuse descriptor, for a server to serve. This is how a
// supervisor without privileges on the host mounts one (the kernel takes a FUSE mount in a
// user namespace only with a /dev/fuse opened in that namespace); a short-lived child
// does it, and hands the descriptor back over a socket.
Result<UniqueFd> mount_fuse_inside(pid_t sandbox_pid, const FuseMount& mount);

}  // namespace nsbox::mount_injection
