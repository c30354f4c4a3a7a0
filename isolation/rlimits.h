// Resource limits set in the child before exec.
#pragma once

#include "isolation/size_tier.h"
#include "isolation/sys/error.h"

namespace nsbox::rlimits {

// Always: no core dumps (they would land in the cwd, inside the files volume), a sane
// fd cap. With `as_cgroup_fallback` (no cgroup could be used) also RLIMIT_AS for memory
// and RLIMIT_NPROC for pids: weaker than a cgroup (per process, not per sandbox), said so
// by `nsbox doctor` and docs/design.md ("Isolation").
Result<void> apply_in_child(const Limits& limits, bool as_cgroup_fallback);

}  // namespace nsbox::rlimits
