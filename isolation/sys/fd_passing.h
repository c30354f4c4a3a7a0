// Messages with file descriptors over a Unix socket (SCM_RIGHTS): how a child hands the
// parent what only it could open (the sandbox's seccomp listener, a volume mounted in its
// private namespace). Sending allocates nothing: usable between clone and exec.
// Protocol frames with several fds are runtime/protocol/frame.cc's.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <span>
#include <vector>

#include "isolation/sys/unique_fd.h"

namespace nsbox::sys {

// Bytes sent, or -1 with errno. `fd` -1 sends none.
ssize_t send_with_fd(int sock, const void* data, size_t len, int fd);

// Bytes received (0: end of file), or -1 with errno; `fd` gets the descriptor that came
// with them (close-on-exec), if one did (more than one: EPROTO). Allocates.
ssize_t recv_with_fd(int sock, void* data, size_t len, UniqueFd& fd);

// Several fds with one message (at most kMaxFds): protocol frames, the kernel zygote's
// requests. Sending allocates nothing either. The receiver's `fds` get what came
// (close-on-exec), in order; more than `max_fds`, or a truncated set, is refused as
// EPROTO and none is kept; receiving allocates.
constexpr size_t kMaxFds = 16;
ssize_t send_with_fds(int sock, const void* data, size_t len, std::span<const int> fds);
ssize_t recv_with_fds(int sock, void* data, size_t len, std::vector<UniqueFd>& fds, size_t max_fds);

}  // namespace nsbox::sys
