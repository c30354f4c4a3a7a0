// Listening on and connecting to the supervisor's unix socket. Paths longer than
// sun_path (108 bytes; a deep --root) go through /proc/self/fd/<dir>/<name>.
#pragma once

#include <sys/socket.h>

#include <string>

#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox::protocol {

// `type`: SOCK_STREAM (a supervisor's frames), SOCK_SEQPACKET (the kernel zygote's records).
Result<UniqueFd> listen_unix(const std::string& path, int type = SOCK_STREAM);
Result<UniqueFd> connect_unix(const std::string& path, int type = SOCK_STREAM);

}  // namespace nsbox::protocol
