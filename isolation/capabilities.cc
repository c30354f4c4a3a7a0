#include "isolation/capabilities.h"

#include <sys/capability.h>
#include <sys/prctl.h>

#include <string>

namespace nsbox::capabilities {

Result<void> drop_all_in_child() {
  // cap_max_bits(): the kernel's count, found once at libcap's start; asking per
  // capability (CAP_IS_SUPPORTED) was a prctl each, 41 on the start-up path.
  for (cap_value_t cap = 0; cap < cap_max_bits(); ++cap)
    if (cap_drop_bound(cap) != 0) return fail(sys_error("drop capability " + std::to_string(cap) + " from the bounding set"));
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0)
    return fail(sys_error("prctl(PR_CAP_AMBIENT_CLEAR_ALL)"));
  cap_t empty = cap_init();
  if (!empty) return fail(sys_error("cap_init"));
  int rc = cap_set_proc(empty);
  int err = errno;
  cap_free(empty);
  if (rc != 0) return fail(sys_error("cap_set_proc(empty)", err));
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return fail(sys_error("prctl(PR_SET_NO_NEW_PRIVS)"));
  return {};
}

}  // namespace nsbox::capabilities
