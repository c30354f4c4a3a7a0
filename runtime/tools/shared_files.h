// upload_local_file(*paths): hands files made in the sandbox back to the user.
//
// Each path is read as the sandbox sees it, with the sandbox user's rights (SandboxFs: a
// symlink to /etc is refused, not followed). A file not yet in the files volume is copied
// to /mnt/files/.nsbox/shared/<random>/<name> (not .nsbox/uploads, which the files volume
// sweeps). The answer, per file, is {"url", "expires_at", "mount_relative_path", "size"}:
// under the CLI the url is file://<host path> of a copy on the host, in the sandbox's
// shared directory of the state root, which goes with the sandbox; the copies of one
// sandbox share a budget (kDefaultBudget), past which a call is refused with a hint to
// `nsbox files download`. Never a raw sandbox path as the link.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <string>

#include "runtime/sandbox_fs.h"
#include "runtime/tools/tool_call.h"

namespace nsbox::tools {

class SharedFiles {
 public:
  static constexpr uint64_t kDefaultBudget = 1ull << 30;
  static constexpr size_t kMaxPaths = 100;

  // `root`: the sandbox's root (/proc/<init>/root); `host_dir`: where the host copies go.
  SharedFiles(SandboxFs fs, std::string host_dir, uint64_t budget = kDefaultBudget)
      : fs_(std::move(fs)), host_dir_(std::move(host_dir)), budget_(budget) {}

  // {"paths": ["report.csv", "/tmp/x.png"]}: one path answers its entry, several a list.
  ToolAnswer upload(const protocol::Json& args);

 private:
  Result<protocol::Json> upload_one(const std::string& path);
  SandboxFs fs_;
  std::string host_dir_;
  uint64_t budget_;
  std::atomic<uint64_t> used_{0};
};

}  // namespace nsbox::tools
