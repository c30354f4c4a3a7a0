// Running a program from a test: arguments, stdin, captured output, a hard time bound
// (a hung program is killed with its process group and the test fails), optionally as
// another user.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace nsbox::test {

struct RunAs {
  uid_t uid;
  gid_t gid;
};

struct ProcessResult {
  int exit_code = -1;  // 128+N when killed by signal N
  std::string out;
  std::string err;
  bool timed_out = false;
  double seconds = 0;
  uint64_t max_rss_bytes = 0;  // peak resident memory of the program, or of a child it waited for if larger
};

struct ProcessOptions {
  std::string stdin_data;
  bool stdin_is_null = true;  // /dev/null unless stdin_data is given
  int timeout_s = 120;
  std::optional<RunAs> as;
  // K=V added to the environment, which is the test's minus any proxy settings (tests
  // stay on loopback; a runner's proxy must not carry their requests), replacing the
  // variables of the same name.
  std::vector<std::string> extra_env;
};

ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options = {});

}  // namespace nsbox::test
