// The user namespace: one id inside (1000, "user"), mapped to one unprivileged host id,
// and one more per account the sandbox declares.
#pragma once

#include <sys/types.h>

#include <vector>

#include "isolation/sys/error.h"

namespace nsbox::userns {

constexpr uid_t kSandboxUid = 1000;
constexpr gid_t kSandboxGid = 1000;
// In a sandbox with accounts of its own: the id of its init and the owner of what the
// accounts share (/tmp, /dev/shm, a shared workspace), so that no account, `user`
// included, is the owner a sticky directory exempts or can reach init's limits (prlimit
// compares ids). No command runs as it.
constexpr uid_t kSystemUid = 999;
constexpr gid_t kSystemGid = 999;

// The host uid/gid the sandbox user maps to. Rootless: the invoking user (the only id an
// unprivileged process may map). Root: a dedicated id with no account and no files on the
// host (kRootModeHostId), so that the sandbox user owns nothing outside its sandbox; root
// in a user namespace that does not map that id (a user-namespaced pod): the highest id
// its namespace maps (docs/scale-out.md, tier B).
struct HostIds {
  uid_t uid;
  gid_t gid;
  // The host ids the accounts' count from (inside id I, not the sandbox user's: this + I -
  // 1000). As root, the sandbox user's own; rootless, none until with_accounts() reads
  // the invoking user's subordinate ids (isolation/subordinate_ids.h).
  uid_t accounts_uid = 0;
  gid_t accounts_gid = 0;
};
constexpr uid_t kRootModeHostId = 1'800'000'000;
HostIds host_ids();
// host_ids() with the accounts' ids: rootless, from the first subordinate id granted to
// the invoking user (inside 999, the system id, is that first one; 1001 the third), or an
// error naming what is missing (uidmap, a line in /etc/subuid).
Result<HostIds> with_accounts(HostIds ids);

// The ids a sandbox maps besides its user's: those of the accounts it declares
// (runtime/core/sandbox_accounts.h). Inside id I maps to the host id
// `accounts_uid + (I - 1000)`, one of its own each: as root in the same unused range as
// the sandbox user's, rootless among the invoking user's subordinate ids.
struct ExtraIds {
  std::vector<uid_t> uids;
  std::vector<gid_t> gids;
  bool empty() const { return uids.empty() && gids.empty(); }
};
uid_t host_uid(HostIds ids, uid_t inside);
gid_t host_gid(HostIds ids, gid_t inside);

// Parent side, while the child waits: setgroups=deny (unprivileged only), then the uid
// and gid maps. Rootless, extra ids are mapped by newuidmap and newgidmap, which check
// them against /etc/subuid and /etc/subgid and leave setgroups allowed (so init drops
// the invoking user's groups); an error names what is missing.
Result<void> write_maps(pid_t child, HostIds ids, const ExtraIds& extra = {});

// Child side, right after the maps are written: become the sandbox user (still holding
// every capability inside the new namespace, since no id in the switch is 0).
Result<void> become_sandbox_user_in_child();
// Then, in a sandbox with accounts, once its root is built: the system id (kSystemUid),
// which its init keeps.
Result<void> become_system_user_in_child();

// For a process that joins a sandbox from outside as host root (a kernel from the kernel
// zygote, docs/kernel-zygote.md): the sandbox user's real and effective ids and no
// supplementary group, but the saved ids left kuid/kgid 0 (unmapped in the sandbox) until
// drop_saved_root_in_child, once its seccomp filter holds. A process may attach to another
// (ptrace, /proc/<pid>/mem, which keeps working once opened) only if the target's real,
// effective *and* saved ids are its own, so no process of the sandbox can reach it in
// between, even where the id change makes it dumpable (fs.suid_dumpable = 1).
Result<void> become_sandbox_user_keeping_saved_root_in_child();
// Then the saved ids too (allowed without a capability: the new value is the real id;
// dumpability does not change with them), checked: every id is the sandbox user's.
Result<void> drop_saved_root_in_child();

}  // namespace nsbox::userns
