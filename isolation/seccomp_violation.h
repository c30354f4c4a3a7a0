// The supervisor's side of the seccomp user-notification listener: a sandboxed process
// made a syscall from another ABI (i386 int 0x80, x32). We learn which, kill the process,
// and keep the description so the command's result can say it.
#pragma once

#include <sys/types.h>

#include <string>

#include "isolation/sys/error.h"

namespace nsbox::seccomp {

struct Violation {
  pid_t host_pid = 0;
  pid_t sandbox_pid = 0;   // as seen inside the sandbox
  pid_t sandbox_pgid = 0;  // its process group, inside the sandbox
  std::string syscall;    // "getpid (i386 ABI, number 20)"
};

// Call when the listener is readable.
Result<Violation> take_violation(int listener_fd);

}  // namespace nsbox::seccomp
