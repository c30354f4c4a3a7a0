// Listening on and connecting to the supervisor's unix socket. Paths longer than
// sun_path (108 bytes; a deep --root) go through /proc/self/fd/<dir>/<name>.
#pragma once

#include <string>

#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox::protocol {

Result<UniqueFd> listen_unix(const std::string& path);
Result<UniqueFd> connect_unix(const std::string& path);

}  // namespace nsbox::protocol
