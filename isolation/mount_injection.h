// Attaching a mount to a sandbox that is already running.
//
// The sandbox's mounts are private (nothing propagates in), so a mount made later on the
// host side — a files volume prepared while the kernel boots, a bucket served by a FUSE
// server in the supervisor — is cloned here (open_tree), and a short-lived child enters the
// sandbox's mount namespace (setns) and attaches the clone at the target (move_mount). The
// caller's own namespaces are untouched.
#pragma once

#include <sys/types.h>

#include <string>

#include "isolation/sys/error.h"

namespace nsbox::mount_injection {

// Clones the tree at `source` (a path in the caller's mount namespace), sets `attrs`
// (MOUNT_ATTR_*) on it, and attaches it at `target` (an existing directory, absolute in
// the sandbox) in the mount namespace of `sandbox_pid`.
Result<void> inject(const std::string& source, pid_t sandbox_pid, const std::string& target, unsigned attrs);

}  // namespace nsbox::mount_injection
