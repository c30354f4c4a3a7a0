// The cached seccomp program is found again only by the build that made it.
#include <catch2/catch.hpp>

#include "isolation/seccomp_policy.h"

TEST_CASE("the seccomp cache key changes with the build, which holds the conditional rules") {
  std::string build = nsbox::seccomp::executable_build_id();
  CHECK(build.size() >= 16);  // Debian's toolchain links a GNU build id by default
  CHECK(nsbox::seccomp::policy_fingerprint(build) == nsbox::seccomp::policy_fingerprint(build));
  CHECK(nsbox::seccomp::policy_fingerprint(build) != nsbox::seccomp::policy_fingerprint(build + "0"));
}
