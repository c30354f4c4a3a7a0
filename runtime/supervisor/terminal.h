// A terminal of the sandbox's own devpts instance, as PTY sessions and tty processes
// open it: the master (kept by the supervisor) and its slave (handed to init as the
// command's stdio and controlling terminal).
#pragma once

#include <sys/ioctl.h>

#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"
#include "runtime/protocol/frame.h"

namespace nsbox {

constexpr unsigned kMaxTerminalDimension = 1000;

struct Terminal {
  UniqueFd master;  // non-blocking
  UniqueFd slave;
};

// cols/rows of a request, each 1..kMaxTerminalDimension; 80x24 when absent.
Result<winsize> window_of(const protocol::Json& request);
// Unlocks and sizes a new master (from the sandbox's ptmx) and opens its slave.
Result<Terminal> open_terminal(UniqueFd master, const winsize& window);

}  // namespace nsbox
