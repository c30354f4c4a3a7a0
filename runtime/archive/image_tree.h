// An image's root, merged once from its unpacked layers (image_layer.h), bottom to top:
// each layer's files and symlinks hard-linked into the tree, its directories made (the
// upper one's mode and times win), its whiteouts applied: `.wh.NAME` removes NAME of the
// layers below, `.wh..wh..opq` empties its directory of them. A sandbox then mounts the
// tree as the one read-only lower layer of its overlay: no whiteout device or overlay
// xattr is ever needed (rootless alike), lookups cross one layer, not N, and the tree
// costs directories and links, not data: every layer's files are stored once, shared by
// the trees of every image that has the layer.
//
// Run as the owner of the layers (nsbox-archive, as the sandbox user): linking another's
// file is refused under fs.protected_hardlinks. No link is ever followed: every step is
// relative to a directory opened with O_NOFOLLOW, and a layer's directory that lands
// where a lower layer left a symlink replaces that symlink.
#pragma once

#include <cstdint>
#include <vector>

#include "isolation/sys/error.h"

namespace nsbox::image_tree {

struct MergeSummary {
  uint64_t entries = 0;  // names linked or made in the tree
  uint64_t removed = 0;  // names whiteouts removed
};

// `layers`: the layers' root directories, bottom first; `out`: the tree's empty root.
Result<MergeSummary> merge(const std::vector<int>& layers, int out);

}  // namespace nsbox::image_tree
