// upload_local_file(*paths): hands files made in the sandbox back to the user.
//
// Each path is read as the sandbox sees it, with the sandbox user's rights (SandboxFs: a
// symlink to /etc is refused, not followed). A file not yet in the files volume is copied
// to /mnt/files/.nsbox/shared/<random>/<name> (not .nsbox/uploads, which the files volume
// sweeps). The answer, per file, is {"url", "expires_at", "mount_relative_path", "size"}:
// under the CLI the url is file://<host path> of a copy on the host, in the sandbox's
// shared directory of the state root, which goes with the sandbox; the copies of one
// sandbox share a budget (kDefaultBudget), past which a call is refused with a hint to
// `nsbox files download`. Both copies keep a sparse file's holes; the budget counts
// apparent sizes, since the sandbox may fill the holes between the count and the copy. Under `nsbox serve` (a link key given) the url is instead the
// server's signed link to the file in the volume, valid kLinkSeconds; no host copy is
// made. Never a raw sandbox path as the link.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <optional>
#include <string>

#include "runtime/links/download_link.h"

#include "runtime/client/sandbox_fs.h"
#include "runtime/protocol/tool_call.h"

namespace nsbox::tools {

class SharedFiles {
 public:
  static constexpr uint64_t kDefaultBudget = 1ull << 30;
  static constexpr size_t kMaxPaths = 100;
  static constexpr int64_t kLinkSeconds = 3600;  // as POST .../files:sign by default

  // How a file is handed out: a host copy in `host_dir`, or (a signer given) a signed
  // link of the server at `link_base`.
  struct Links {
    std::string sandbox_id;
    std::string host_dir;
    std::optional<links::LinkSigner> signer;
    std::string link_base;
  };
  SharedFiles(SandboxFs fs, Links links, uint64_t budget = kDefaultBudget)
      : fs_(std::move(fs)), links_(std::move(links)), budget_(budget) {}

  // {"paths": ["report.csv", "/tmp/x.png"]}: one path answers its entry, several a list.
  ToolAnswer upload(const protocol::Json& args);

 private:
  Result<protocol::Json> upload_one(const std::string& path);
  Result<protocol::Json> host_copy(const std::string& path, const std::string& relative, UniqueFd shared, uint64_t size);
  SandboxFs fs_;
  Links links_;
  uint64_t budget_;
  std::atomic<uint64_t> used_{0};
};

}  // namespace nsbox::tools
