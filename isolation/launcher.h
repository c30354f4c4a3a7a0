// Starting a sandbox: clone into new namespaces, finish the setup from both sides, exec
// the sandbox's init. The order is runc's and crun's (docs/semantics.md, "The sandbox"):
//
//   parent                                   child
//   ------                                   -----
//   plan rootfs, compile seccomp (before)
//   clone3(NEWUSER|NEWNS|NEWPID|NEWUTS|NEWIPC[|NEWNET], v2: INTO_CGROUP)
//                                            v1: join the cgroup (writes "0" to `tasks`)
//   write setgroups=deny, uid_map, gid_map   waits for "go"
//   send "go"  ───────────────────────────►  unshare(NEWCGROUP) (now rooted at its cgroup)
//                                            clone the bind sources (still host fsuid)
//                                            become uid/gid 1000 (caps kept: no id was 0)
//                                            hostname, loopback up
//                                            build the root on a tmpfs, pivot_root, detach
//                                            (with accounts: become 999, init's id)
//                                            PDEATHSIG, setsid, rlimits, close fds
//                                            drop every capability (init of a sandbox
//                                            with accounts: all but setuid, setgid, kill),
//                                            no_new_privs
//                                            seccomp (last: earlier steps need mount etc.)
//   ◄──────────── listener fd ────────────   send the seccomp listener fd
//   ◄──────────── EOF on exec ────────────   exec /opt/nsbox/nsbox-init
//
// Any failure in the child is sent back over the sync socket with errno and the step's
// message, and the child exits: it never goes on half-isolated (minijail's rule).
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "isolation/cgroup.h"
#include "isolation/command_pid1.h"
#include "isolation/network.h"
#include "isolation/rootfs.h"
#include "isolation/seccomp_policy.h"
#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"
#include "isolation/userns.h"

namespace nsbox::launcher {

struct Spec {
  rootfs::Spec rootfs;
  network::Mode net = network::Mode::kNone;
  Limits limits;
  cgroup::Driver* cgroup = nullptr;  // null: no cgroup could be used; fall back to rlimits
  const seccomp::Program* seccomp = nullptr;
  std::string hostname = "nsbox";
  std::string init_path = "/opt/nsbox/nsbox-init";  // inside the sandbox
  std::vector<std::string> init_argv;
  std::vector<std::string> init_env;
  int control_fd = -1;  // becomes fd 3 in init
  // The ids of the accounts the sandbox declares (userns.h), kSystemUid among them: mapped
  // besides its user's, and with any, init runs as kSystemUid and keeps what it needs to
  // start commands as them (capabilities::drop_all_but_id_switching_in_child). The rootfs
  // spec has their names and homes.
  userns::ExtraIds extra_ids;
  // One-shot sandboxes: pid 1 runs this one command (command_pid1.h) instead of exec'ing
  // init; control_fd is then unused and its reports arrive on Sandbox::reports.
  std::optional<command_pid1::Command> command;
  // Work of the caller's that overlaps the sandbox's build: run once the child has been
  // told to go, before its set-up is awaited (the supervisor mounts the files volume
  // here, in its own process, instead of forking a child to do it alongside).
  std::function<void()> while_building;
};

struct Sandbox {
  pid_t init_pid = -1;  // in the host's pid namespace
  UniqueFd pidfd;
  UniqueFd seccomp_listener;
  UniqueFd reports;  // with Spec::command: command_pid1::Report structs
};

// Returns once init has been exec'd (or the setup failed, with the child reaped).
Result<Sandbox> launch(const Spec& spec);

// The fd number the control socket has in init.
constexpr int kInitControlFd = 3;

}  // namespace nsbox::launcher
