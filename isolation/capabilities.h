// Capabilities: a sandboxed process holds none, in any set, and can never regain one.
#pragma once

#include "isolation/sys/error.h"

namespace nsbox::capabilities {

// In the child, after the last privileged setup step: empties the bounding set (needs
// CAP_SETPCAP, so it goes first), the ambient and inheritable sets, then effective and
// permitted; sets no_new_privs so no exec (setuid, file caps) can add any back.
Result<void> drop_all_in_child();

}  // namespace nsbox::capabilities
