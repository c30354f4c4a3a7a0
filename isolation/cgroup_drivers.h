// The two cgroup drivers behind cgroup::Driver (internal to isolation/).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "isolation/cgroup.h"

namespace nsbox::cgroup {

std::unique_ptr<Driver> make_v1_driver(Placement placement);
std::unique_ptr<Driver> make_v2_driver(Placement placement);

// Shared by both drivers: the pids listed in a cgroup.procs file.
Result<std::vector<pid_t>> read_procs(const std::string& dir);
// SIGKILLs what is left in `dir` and waits (bounded) until it is empty, then rmdir.
Result<void> kill_and_remove(const std::string& dir);
// mkdir that treats "already there" as success and names the path on failure.
Result<void> make_cgroup_dir(const std::string& dir);

}  // namespace nsbox::cgroup
