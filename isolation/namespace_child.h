// Getting a descriptor that only a process inside a running sandbox's namespaces can
// make: a FUSE mount's /dev/fuse (mount_injection), a socket listening in its network
// namespace (network::listen_inside). A short-lived child of the caller, holding nothing
// of the caller's but the namespaces it is to join and one socket, does the steps and
// hands the descriptor back; the caller's own namespaces are untouched.
#pragma once

#include <sys/types.h>

#include <functional>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox::namespace_child {

// What the child did last: an index into the caller's step names, and its errno.
struct Report {
  int step = 0;
  int err = 0;
};

// Runs in the child (single-threaded, as setns into a user namespace wants): fd i is the
// namespace `namespaces[i]` of the sandbox ("user", "mnt", "net"), to setns into; sets
// report.step before each step and returns the descriptor to hand back, or -1 with errno
// set. Only system calls: no allocation.
using Body = std::function<int(Report& report)>;

// /proc/<sandbox_pid>/ns/<name> for each of `namespaces` ("user", "net", ...), open, in
// that order: what a child joins with setns().
Result<std::vector<UniqueFd>> open_namespaces(pid_t sandbox_pid, std::initializer_list<const char*> namespaces);

// The descriptor `body` made in a child with the sandbox's `namespaces` open; a failed
// step is an error naming `steps[report.step]`, its errno and `what`.
Result<UniqueFd> make_fd(pid_t sandbox_pid, std::initializer_list<const char*> namespaces,
                         std::span<const char* const> steps, const Body& body, const std::string& what);

// For steps that make nothing to hand back (mount_injection::inject's setns + move_mount):
// `body` runs in a child that shares our memory (CLONE_VM | CLONE_VFORK, as posix_spawn
// does: no address space copied, torn down or faulted back in afterwards; we wait until
// it has exited) but has its own root, cwd, namespaces and fd table; `ns[i]` is the
// sandbox's namespace `namespaces[i]`, open. It returns 0, or -1 with errno set after
// setting report.step. Only system calls, no allocation, no lock: a caller's other
// threads go on running. A failed step is an error naming it, its errno and `what`.
using SharedBody = std::function<int(Report& report, std::span<const int> ns)>;
Result<void> run_sharing_memory(pid_t sandbox_pid, std::initializer_list<const char*> namespaces,
                                std::span<const char* const> steps, const SharedBody& body, const std::string& what);

// make_fd's cheap twin, for a descriptor wanted often (a socket per forwarded
// connection): the child shares our memory and our fd table too (CLONE_FILES), so the
// descriptor `body` returns (not 0) is ours as it is made; no fork, no descriptor passing.
// `ns` as for run_sharing_memory, opened by the caller once (open_namespaces).
Result<UniqueFd> make_fd_sharing_memory(std::span<const int> ns, std::span<const char* const> steps,
                                        const SharedBody& body, const std::string& what);

}  // namespace nsbox::namespace_child
