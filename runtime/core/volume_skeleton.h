// A volume's skeleton: a directory every new volume of a store starts with (homes: the
// user site and matplotlib's font list, kernel/tools/make_home_skeleton.py). What names
// the template formatted with it, and the copy mkfs.ext4 -d formats from.
#pragma once

#include <string>

#include "isolation/sys/error.h"
#include "isolation/userns.h"

namespace nsbox {

// The skeleton's entries in order (path, and a file's content's hash), hashed: any change
// of it (another matplotlib's font list, another Python's user site) names another
// template. Empty when there is no skeleton (an install from before it: homes are
// formatted empty, and kernels make what they need).
std::string skeleton_tag(const std::string& skeleton);

// A copy of `skeleton` at `stage` owned by the sandbox's user (mkfs.ext4 -d keeps owners):
// directories 0755, files 0644, nothing else copied. Owners and modes are set on what was
// made and is held open, never through a path a link could redirect. A stage left by an
// earlier maker of the same pid and thread (a restart) is removed first.
Result<void> stage_skeleton(const std::string& skeleton, const std::string& stage, const userns::HostIds& ids);

}  // namespace nsbox
