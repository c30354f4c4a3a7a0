// Making a manifest's entries in a new sandbox's /home/user (runtime/client/manifest.h): file
// and dir entries from their content, local_file and local_dir entries copied from the
// host, git_repo entries cloned on the host and copied the same way.
//
// Host sources are read without following any symlink: a link anywhere in a source's
// path or inside a local_dir refuses the entry (the SDK's `symlink_not_supported`), as do
// FIFOs, sockets and devices; a tree holds at most 100,000 members and 64 levels. Git
// runs with hooks disabled and no system or global config, into a private scratch
// directory that goes when the entries are written (or fail). Everything is checked and
// cloned by prepare(), before the sandbox is made; write() copies with the sandbox user's
// rights through SandboxFs, checking each source again as it reads it.
#pragma once

#include <string>
#include <vector>

#include "isolation/sys/error.h"
#include "runtime/client/manifest.h"
#include "runtime/client/sandbox_fs.h"

namespace nsbox {

class WorkspaceSources {
 public:
  // `scratch_parent`: where git clones go (a private directory is made in it when needed).
  static Result<WorkspaceSources> prepare(const std::vector<WorkspaceEntry>& entries, const std::string& scratch_parent);

  WorkspaceSources(WorkspaceSources&& other) noexcept;
  WorkspaceSources& operator=(WorkspaceSources&&) = delete;
  WorkspaceSources(const WorkspaceSources&) = delete;
  ~WorkspaceSources();

  // Makes every entry (the same list given to prepare) in the sandbox's /home/user.
  Result<void> write(const SandboxFs& fs, const std::vector<WorkspaceEntry>& entries) const;

 private:
  WorkspaceSources() = default;
  std::string scratch_;             // "" when no git_repo needed one
  std::vector<std::string> trees_;  // per entry: the host tree to copy ("" for file/dir entries)
};

}  // namespace nsbox
