// cgroups for one sandbox: where they live, how limits are written, how they are removed.
//
// Detection follows crun: statfs on /sys/fs/cgroup tells unified (cgroup2) from
// hybrid/legacy (tmpfs with v1 hierarchies). A hybrid host may have some controller
// (hugetlb on the build machines) attached to /sys/fs/cgroup/unified; that is normal, and
// nsbox then uses the v1 hierarchies for memory, pids and cpu. crun refuses such hosts;
// we do not.
//
// Two drivers share one interface: CgroupV1 writes one directory per controller,
// CgroupV2 one directory. Either is rebuilt from its recorded placement so that `nsbox rm`
// can clean up after a supervisor that died.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "isolation/size_tier.h"
#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox::cgroup {

enum class Mode { kUnified, kHybrid, kLegacy };
std::string_view mode_name(Mode mode);
Result<Mode> detect_mode(const std::string& root = "/sys/fs/cgroup");

// Where one sandbox's cgroup directories are. Recorded in the state file.
struct Placement {
  std::string driver;                   // "v1" or "v2"
  std::vector<std::string> dirs;        // v1: one per controller; v2: one
  std::vector<std::string> controllers; // v1: the controller of each dir
};

// A cgroup directory as the sandbox sees it: bound read-only at `inside` so that code in
// the sandbox can read its own limits (e.g. /sys/fs/cgroup/memory/memory.limit_in_bytes).
struct View {
  std::string host_dir;
  std::string inside;
};

// How the sandbox's first process enters the cgroup. Writing a pid to cgroup.procs
// migrates a thread group under cgroup_threadgroup_rwsem, whose write side waits for an
// RCU grace period: 5-17 ms per sandbox measured on the hybrid build machines, more than
// all the rest of the start. Instead, v2 creates the child inside the cgroup
// (clone3 CLONE_INTO_CGROUP), and on v1 the child, still single-threaded, moves itself
// by writing "0" to each `tasks` file (a single-thread self-move skips that lock).
// The fds are opened by the parent, so the write is checked against its credentials.
struct Join {
  UniqueFd clone_into;              // v2: the cgroup directory
  std::vector<UniqueFd> self_tasks;  // v1: each hierarchy's `tasks` file, open for writing
};

class Driver {
 public:
  virtual ~Driver() = default;
  virtual const Placement& placement() const = 0;
  virtual Result<void> create() = 0;
  virtual Result<void> apply(const Limits& limits) = 0;
  // The cgroup's share of contended CPU, in cgroup v2's units: 1 (the least: a warm
  // pool's sandbox while it is built and waits) to 10000; 100 is every cgroup's default.
  // v1 writes cpu.shares (100 -> 1024, 1 -> 2, the least).
  virtual Result<void> set_cpu_weight(unsigned weight) = 0;
  virtual Result<Join> open_join() const = 0;
  // Total OOM kills so far in this cgroup; a rise during a command means it met the OOM killer.
  virtual Result<uint64_t> oom_kills() const = 0;
  virtual Result<uint64_t> memory_usage() const = 0;
  // Kills every process still in the cgroup (they are all the sandbox's), waits a bounded
  // time for them to go, and removes the directories.
  virtual Result<void> destroy() = 0;
  virtual std::vector<View> views() const = 0;
};

// Chooses the cgroup for sandbox `id`: `nsbox-<id>` at the top of each hierarchy (root),
// or next to our own cgroup in a delegated v2 subtree (rootless). No shared parent: one
// would cost a mkdir and an rmdir per sandbox, and would outlive the last one. Fails with kUnsupported
// (and a hint) when limits cannot be set this way; the caller then falls back to rlimits.
Result<std::unique_ptr<Driver>> for_new_sandbox(const std::string& id);
std::unique_ptr<Driver> from_placement(const Placement& placement);

// Removes the cgroups named `nsbox-<prefix><pid>-...` whose creating process <pid> is gone
// (a one-shot `nsbox run` that was SIGKILLed could not clean up).
void remove_orphans(const std::string& prefix);

// Pure parsing, exposed for tests (mountinfo: isolation/sys/mountinfo.h).
// "0::/user.slice/x" -> "/user.slice/x" (the v2 line of /proc/self/cgroup)
std::string own_v2_path(const std::string& proc_self_cgroup);
uint64_t parse_keyed_value(const std::string& text, std::string_view key);  // "oom_kill 3"

}  // namespace nsbox::cgroup
