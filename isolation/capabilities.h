// Capabilities: a sandboxed process holds none, in any set, and can never regain one
// (the one exception, the init of a sandbox with accounts, is below).
#pragma once

#include "isolation/sys/error.h"

namespace nsbox::capabilities {

// In the child, after the last privileged setup step: empties the bounding set (needs
// CAP_SETPCAP, so it goes first), the ambient and inheritable sets, then effective and
// permitted; sets no_new_privs so no exec (setuid, file caps) can add any back.
Result<void> drop_all_in_child();

// The same, but for a sandbox with accounts of its own (runtime/core/sandbox_accounts.h):
// its init alone is to start commands as them and signal them, so CAP_SETUID, CAP_SETGID
// and CAP_KILL stay in its permitted and effective sets, passed through its exec as ambient
// ones (the only way across an exec without file capabilities). They are capabilities of
// the sandbox's user namespace only, over ids that namespace maps (never 0). Init clears
// the ambient set at once and every child of its drops them all before its own exec.
Result<void> drop_all_but_id_switching_in_child();

}  // namespace nsbox::capabilities
