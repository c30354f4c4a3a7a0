#include "runtime/core/install_layout.h"

#include <unistd.h>

#include <climits>
#include <cstdlib>

#include "isolation/sys/files.h"

namespace nsbox {

Result<InstallLayout> InstallLayout::discover() {
  if (const char* env = std::getenv("NSBOX_LIBEXEC"); env && *env) return InstallLayout{env};
  char exe[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return fail(sys_error("readlink /proc/self/exe"));
  std::string dir(exe, static_cast<size_t>(n));
  dir = dir.substr(0, dir.rfind('/'));
  constexpr std::string_view kSuffix = "/libexec/nsbox";
  std::string libexec = dir.ends_with(kSuffix) ? dir : dir.substr(0, dir.rfind('/')) + std::string(kSuffix);
  if (!files::exists(libexec + "/sandbox/nsbox-init"))
    return fail(make_error(ErrorCode::kNotFound, "nsbox's helpers are not in " + libexec,
                           "reinstall nsbox, or set NSBOX_LIBEXEC to the directory holding nsbox-supervisor"));
  return InstallLayout{libexec};
}

}  // namespace nsbox
