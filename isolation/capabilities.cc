#include "isolation/capabilities.h"

#include <sys/capability.h>
#include <sys/prctl.h>

#include <string>
#include <vector>

namespace nsbox::capabilities {

namespace {

Result<void> empty_bounding_and_ambient() {
  // cap_max_bits(): the kernel's count, found once at libcap's start; asking per
  // capability (CAP_IS_SUPPORTED) was a prctl each, 41 on the start-up path.
  for (cap_value_t cap = 0; cap < cap_max_bits(); ++cap)
    if (cap_drop_bound(cap) != 0) return fail(sys_error("drop capability " + std::to_string(cap) + " from the bounding set"));
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0)
    return fail(sys_error("prctl(PR_CAP_AMBIENT_CLEAR_ALL)"));
  return {};
}

Result<void> no_new_privs() {
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return fail(sys_error("prctl(PR_SET_NO_NEW_PRIVS)"));
  return {};
}

}  // namespace

Result<void> drop_all_in_child() {
  NSBOX_CHECK(empty_bounding_and_ambient());
  cap_t empty = cap_init();
  if (!empty) return fail(sys_error("cap_init"));
  int rc = cap_set_proc(empty);
  int err = errno;
  cap_free(empty);
  if (rc != 0) return fail(sys_error("cap_set_proc(empty)", err));
  return no_new_privs();
}

namespace {

Result<void> set_caps(const std::vector<cap_value_t>& held, const std::vector<cap_value_t>& inheritable, const char* what) {
  cap_t caps = cap_init();
  if (!caps) return fail(sys_error("cap_init"));
  int rc = cap_set_flag(caps, CAP_PERMITTED, static_cast<int>(held.size()), held.data(), CAP_SET);
  if (rc == 0) rc = cap_set_flag(caps, CAP_EFFECTIVE, static_cast<int>(held.size()), held.data(), CAP_SET);
  if (rc == 0) rc = cap_set_flag(caps, CAP_INHERITABLE, static_cast<int>(inheritable.size()), inheritable.data(), CAP_SET);
  if (rc == 0) rc = cap_set_proc(caps);
  int err = errno;
  cap_free(caps);
  if (rc != 0) return fail(sys_error(std::string("cap_set_proc(") + what + ")", err));
  return {};
}

}  // namespace

Result<void> drop_all_but_id_switching_in_child() {
  // In this order: a capability enters the inheritable set only while the bounding set
  // has it, and emptying the bounding set needs CAP_SETPCAP, dropped last.
  const std::vector<cap_value_t> kept = {CAP_SETUID, CAP_SETGID, CAP_KILL};
  std::vector<cap_value_t> with_setpcap = kept;
  with_setpcap.push_back(CAP_SETPCAP);
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0)
    return fail(sys_error("prctl(PR_CAP_AMBIENT_CLEAR_ALL)"));
  NSBOX_CHECK(set_caps(with_setpcap, kept, "setuid, setgid, kill, setpcap"));
  for (cap_value_t cap : kept)
    if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) != 0)
      return fail(sys_error("prctl(PR_CAP_AMBIENT_RAISE, " + std::to_string(cap) + ")"));
  for (cap_value_t cap = 0; cap < cap_max_bits(); ++cap)
    if (cap_drop_bound(cap) != 0) return fail(sys_error("drop capability " + std::to_string(cap) + " from the bounding set"));
  NSBOX_CHECK(set_caps(kept, kept, "setuid, setgid, kill"));
  return no_new_privs();
}

}  // namespace nsbox::capabilities
