#include "isolation/rlimits.h"

#include <sys/resource.h>

#include <string>

namespace nsbox::rlimits {
namespace {

Result<void> set(int resource, const char* name, rlim_t value) {
  rlimit current{};
  if (::getrlimit(resource, &current) != 0) return fail(sys_error(std::string("getrlimit ") + name));
  // Never raise a hard limit the host gave us; only lower.
  rlim_t hard = current.rlim_max == RLIM_INFINITY ? value : std::min(value, current.rlim_max);
  rlimit next{hard, hard};
  if (::setrlimit(resource, &next) != 0)
    return fail(sys_error(std::string("setrlimit ") + name + " " + std::to_string(value)));
  return {};
}

}  // namespace

Result<void> apply_in_child(const Limits& limits, bool as_cgroup_fallback) {
  NSBOX_CHECK(set(RLIMIT_CORE, "RLIMIT_CORE", 0));
  NSBOX_CHECK(set(RLIMIT_NOFILE, "RLIMIT_NOFILE", 65536));
  if (as_cgroup_fallback) {
    NSBOX_CHECK(set(RLIMIT_AS, "RLIMIT_AS", limits.memory_bytes));
    NSBOX_CHECK(set(RLIMIT_NPROC, "RLIMIT_NPROC", limits.pids));
  }
  return {};
}

}  // namespace nsbox::rlimits
