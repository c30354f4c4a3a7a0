// A TCP connection made within a time bound: one implementation for the egress proxy's
// connections out and the server's to a sandbox's port forward.
#pragma once

#include <sys/socket.h>

#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox::sys {

// A connected, non-blocking socket to `address` (AF_INET or AF_INET6), or kTimeout when
// nothing answered within `timeout_ms`, or the connect's errno. Callers add what it was to.
Result<UniqueFd> connect_within(const sockaddr_storage& address, int timeout_ms);

}  // namespace nsbox::sys
