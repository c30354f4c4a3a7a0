#include "isolation/userns.h"

#include <unistd.h>

#include <string>

#include "isolation/sys/files.h"

namespace nsbox::userns {

HostIds host_ids() {
  if (::geteuid() == 0) return {kRootModeHostId, kRootModeHostId};
  return {::geteuid(), ::getegid()};
}

Result<void> write_maps(pid_t child, HostIds ids) {
  std::string proc = "/proc/" + std::to_string(child);
  NSBOX_CHECK(files::write_file(proc + "/setgroups", "deny"));
  NSBOX_CHECK(files::write_file(proc + "/uid_map", std::to_string(kSandboxUid) + " " + std::to_string(ids.uid) + " 1\n"));
  NSBOX_CHECK(files::write_file(proc + "/gid_map", std::to_string(kSandboxGid) + " " + std::to_string(ids.gid) + " 1\n"));
  return {};
}

Result<void> become_sandbox_user_in_child() {
  if (::setresgid(kSandboxGid, kSandboxGid, kSandboxGid) != 0) return fail(sys_error("setresgid(1000)"));
  if (::setresuid(kSandboxUid, kSandboxUid, kSandboxUid) != 0) return fail(sys_error("setresuid(1000)"));
  return {};
}

}  // namespace nsbox::userns
