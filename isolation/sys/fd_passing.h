// One message with at most one file descriptor over a Unix socket (SCM_RIGHTS): how a
// child hands the parent what only it could open (the sandbox's seccomp listener, a
// volume mounted in its private namespace). No allocation: usable between clone and exec.
// Protocol frames with several fds are runtime/protocol/frame.cc's.
#pragma once

#include <sys/types.h>

#include <cstddef>

#include "isolation/sys/unique_fd.h"

namespace nsbox::sys {

// Bytes sent, or -1 with errno. `fd` -1 sends none.
ssize_t send_with_fd(int sock, const void* data, size_t len, int fd);

// Bytes received (0: end of file), or -1 with errno; `fd` gets the descriptor that came
// with them (close-on-exec), if one did.
ssize_t recv_with_fd(int sock, void* data, size_t len, UniqueFd& fd);

}  // namespace nsbox::sys
