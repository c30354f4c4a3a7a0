// Running a program to completion from a host-side process, with what it is given and
// what it may cost bounded: its input written to its stdin, its stdout and stderr
// collected up to a limit each, a deadline after which its whole process group is
// killed, and nothing of the caller's (fds, signal mask) passed on. It dies with the
// caller. Safe from many threads at once (fork + async-signal-safe calls + exec).
#pragma once

#include <string>
#include <vector>

namespace nsbox::sys {

struct ProgramRun {
  int status = -1;         // waitpid's; -1: it could not be started (err says why)
  bool timed_out = false;  // killed at the deadline
  bool out_cut = false;    // killed for printing more than max_out
  std::string out;         // the first max_out bytes of stdout
  std::string err;         // the last max_err bytes of stderr
};

// "signal 11 (SIGSEGV)"; the number alone where the libc names none.
std::string describe_signal(int signal);
// How a process ended, as said after its name: "exited with status 3", "was killed by
// signal 9 (SIGKILL)".
std::string describe_wait_status(int status);

// argv[0] is the program's path. `env`: the whole environment ("K=V"). `dir`: its
// working directory (empty: the caller's). `fd3`: given to it as its fd 3 (-1: none), for
// what it writes besides its stdout (a stream the caller reads meanwhile, on another thread).
ProgramRun run_program(const std::vector<std::string>& argv, const std::string& dir, const std::vector<std::string>& env,
                       const std::string& input, double timeout_s, size_t max_out, size_t max_err, int fd3 = -1);

}  // namespace nsbox::sys
