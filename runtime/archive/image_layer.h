// An image's layer (an OCI or Docker layer: a tar, gzip- or zstd-compressed or not), read
// once: its uncompressed bytes hashed (the layer's diff_id, which the image's config
// names and the store checks), and, when asked, its tree unpacked into the current
// directory. A layer comes from whoever made the image and is hostile like a sandbox's
// archive: nsbox-archive unpacks it as the sandbox user (archive_main.cc), never as root.
//
// What is kept: regular files, directories, symlinks (absolute ones too: they resolve in
// the sandbox's own root, and nothing on the host follows them), hard links to a file
// made earlier in the layer, and whiteouts (`.wh.NAME`, `.wh..wh..opq`) as the empty files
// they are, for the image's merge to read (image_tree.h). Permission bits without setuid
// and setgid; owners are whoever unpacks (every image file is the sandbox user's, as
// root and rootless alike); no extended attribute (no file capability). Device nodes,
// FIFOs and sockets are left out, counted and named. Refused, before that member is
// written: `..`, absolute names, a member written through a symlink, a hard link to what
// is not an earlier file, a name twice (but a directory), more members or bytes than the
// limits, and a stream of more than the limits allow once decompressed (a bomb).
#pragma once

#include <cstdint>

#include "isolation/sys/error.h"
#include "runtime/archive/tree_archive.h"

namespace nsbox::image_layer {

struct LayerLimits {
  uint64_t max_members = 1'000'000;
  uint64_t max_bytes = 64ull << 30;  // of file contents
};

// summary.sha256: the diff_id's hex digits. Without `extract`, only hashes (a layer the
// store has already: its id is still checked against this pull's config).
Result<snapshot::ArchiveSummary> read(int blob_fd, const LayerLimits& limits, bool extract);

}  // namespace nsbox::image_layer
