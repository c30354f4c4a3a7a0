// A files volume's disk: a sparse file holding an ext4 filesystem whose size is the
// volume's quota. Writing past it gives ENOSPC inside the sandbox, and the host disk
// holds only what was written.
//
// An image is only ever attached to one loop device at a time: two loop devices on one
// file would give two ext4 superblocks on the same blocks (corruption). So attaching
// first looks for a loop device already backed by the image (sysfs), under a lock on the
// image (`<image>.lock`, made by the first attach and marked by each, removed only with
// the image: where this attach made it and nobody marked it, nothing is searched). Loop
// devices are attached with autoclear: they go away when their last mount does, wherever
// that mount was (nsbox mounts volumes in private mount namespaces only).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox::volume_image {

// Whether images work here: root, /dev/loop-control and mkfs.ext4. The error says which
// is missing; without them volumes are plain directories with no quota.
Result<void> available();

// Formats a new image (mkfs.ext4, lazy init) owned inside by uid/gid; `contents` (a
// directory, or empty) is copied in as it is, owners included (mkfs.ext4 -d).
Result<void> create(const std::string& path, uint64_t bytes, uid_t owner, gid_t group, const std::string& contents = "");

// A new image at `path` that is a copy of `formatted` (made by create() and never
// attached since), holes kept and synced: the same filesystem, UUID included, at a
// fraction of mkfs's cost. ext4 does not mind two filesystems with one UUID.
Result<void> copy(const std::string& formatted, const std::string& path);

// The loop device for `image`, attached if none is (nsbox processes take turns at taking a
// free device; one another program takes first is waited for, up to 10 s). The open fd
// keeps an autoclear device attached until something mounts it: closing the last fd of an
// unmounted autoclear device detaches it at once.
struct Attached {
  std::string device;  // "/dev/loop7"
  UniqueFd fd;
};
Result<Attached> attach(const std::string& image);

// Mounts `image` at `target` in the caller's mount namespace (nosuid, nodev).
Result<void> mount(const std::string& image, const std::string& target);

// A directory fd on the root of `image`, a detached mount (in no mount namespace): usable
// until closed, invisible to everyone else, leaving nothing behind. Thread-safe.
Result<UniqueFd> open_privately(const std::string& image);

// Parses "10G", "512M", "1048576" (bytes); refuses 0 and sizes under 16 MiB.
Result<uint64_t> parse_size(const std::string& text);

}  // namespace nsbox::volume_image
