// The second strategy for bucket mounts: rclone or s3fs (Debian packages), run on the host
// side like nsbox-bucketfs, mounting into the supervisor's namespace; the mount is then
// attached in the sandbox the same way.
//
// Their secrets go in 0600 files (an rclone config, an s3fs passwd file) that exist only
// until the helper has mounted, never in an argument list; an environment only for s3fs's
// session token, which it reads from nowhere else.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "isolation/sys/error.h"
#include "mounts/bucket/mount_spec.h"

namespace nsbox::bucket {

struct HelperPaths {
  std::string mountpoint;
  std::string secrets_dir;  // 0700, for the files below
  std::string cache_dir;    // rclone's write cache, s3fs's temporary files
  uid_t uid = 0;            // the owner the files show
  gid_t gid = 0;
  // The cache's disk: what rclone's cache may hold (--vfs-cache-max-size, a soft bound:
  // files open or not yet uploaded stay), and what s3fs leaves free (ensure_diskfree).
  uint64_t cache_max_bytes = 0;
  uint64_t disk_reserve_bytes = 1ull << 30;
};

struct HelperCommand {
  std::string program;  // absolute
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> secret_files;  // path, content (0600)
  std::vector<std::string> environment;                           // K=V: all it gets
};

// The proxy settings among `environment`'s K=V entries: http_proxy, https_proxy,
// all_proxy and no_proxy, lower or upper case, but not HTTP_PROXY (a CGI request can set
// it; curl ignores it too). The one part of the nsbox command's environment that reaches
// the host-side mount servers, builtin or helper; never the sandbox.
bool is_proxy_setting(std::string_view entry);
std::vector<std::string> proxy_settings(char** environment);

// Where the helper's binary is, or a "mount tool missing" error naming the package.
Result<std::string> find_helper(MountStrategy strategy);

// The command line, environment (with this process's proxy settings) and secret files for
// `program` (what find_helper found).
Result<HelperCommand> helper_command(const std::string& program, const BucketMount& mount,
                                     const BucketCredentials& credentials, const HelperPaths& paths);

}  // namespace nsbox::bucket
