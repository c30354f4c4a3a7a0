// The subordinate ids /etc/subuid and /etc/subgid grant the invoking user, and Debian's
// uidmap (newuidmap, newgidmap: setuid helpers that check the grant) to map them: how an
// unprivileged process gives a user namespace more ids than its own. Rootless, a
// sandbox's accounts map to them (isolation/userns.h), and what those accounts leave on
// the host is removed as root of a namespace of our own that maps them all.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "isolation/sys/error.h"

namespace nsbox::subids {

struct Range {
  uint32_t start = 0;
  uint32_t count = 0;
  bool holds(uint64_t id) const { return id >= start && id - start < count; }
};

// The first range `text` (a subuid or subgid file) grants the user `name` or `id`;
// none: count 0. A range that holds id 0 is never one.
Range grant_in(const std::string& text, const std::string& name, uint32_t id);

struct Grant {
  Range uids, gids;
};
// The invoking user's grant, or an error naming what is missing: newuidmap/newgidmap
// (install uidmap) or a line in /etc/subuid or /etc/subgid (usermod --add-subuids).
Result<Grant> own_grant();

// One line of a map: `count` ids from `inside` map to `outside` and up.
struct MapLine {
  uint32_t inside, outside, count;
};
// newuidmap (gids: newgidmap) PID with `lines`, which the grant must hold (or be the
// caller's own id alone). newgidmap leaves setgroups allowed when a subordinate range is
// mapped: the namespace's root may then drop the invoking user's groups.
Result<void> write_map(pid_t pid, bool gids, const std::vector<MapLine>& lines);

// Runs `work` as root of a user namespace of its own that maps the invoking user's id to
// 0 and its whole grant from 1: it may then remove, read or change whatever files any
// rootless sandbox of this user made (an account's, owned by a subordinate id), and
// nothing of anyone else's.
Result<void> as_root_of_own_grant(const Grant& grant, const std::function<Result<void>()>& work, const std::string& what);

// files::remove_tree, and rootless, where that is refused, once more as root of the own
// grant's namespace: a tree a rootless sandbox with accounts wrote (a shared workspace)
// holds files and 0700 directories of subordinate ids.
Result<void> remove_tree(const std::string& path);

}  // namespace nsbox::subids
