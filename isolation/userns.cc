#include "isolation/userns.h"

#include <grp.h>
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
  // Unprivileged, the gid map may only be written after setgroups is denied (and the
  // user's own supplementary groups then stay: the kernel allows no way to drop them).
  // As root, setgroups stays allowed so the child can drop root's groups itself, and
  // without capabilities the sandbox can never call it again.
  if (::geteuid() != 0) NSBOX_CHECK(files::write_file(proc + "/setgroups", "deny"));
  NSBOX_CHECK(files::write_file(proc + "/uid_map", std::to_string(kSandboxUid) + " " + std::to_string(ids.uid) + " 1\n"));
  NSBOX_CHECK(files::write_file(proc + "/gid_map", std::to_string(kSandboxGid) + " " + std::to_string(ids.gid) + " 1\n"));
  return {};
}

Result<void> become_sandbox_user_in_child() {
  // Root's supplementary groups would otherwise follow the child and give it group
  // access to host files.
  if (::setgroups(0, nullptr) != 0 && errno != EPERM) return fail(sys_error("setgroups(0)"));
  if (::setresgid(kSandboxGid, kSandboxGid, kSandboxGid) != 0) return fail(sys_error("setresgid(1000)"));
  if (::setresuid(kSandboxUid, kSandboxUid, kSandboxUid) != 0) return fail(sys_error("setresuid(1000)"));
  return {};
}

}  // namespace nsbox::userns
