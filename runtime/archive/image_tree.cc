#include "runtime/archive/image_tree.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <string>

#include "isolation/sys/files.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox::image_tree {
namespace {

constexpr int kMaxDepth = 256;
const std::string kWhiteout = ".wh.";
const std::string kOpaque = ".wh..wh..opq";

Result<UniqueFd> open_dir_at(int dir, const std::string& name, const std::string& shown) {
  UniqueFd fd(::openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return fail(sys_error("open " + shown));
  return fd;
}

// Removes `name` from the tree's directory `dir`, whatever it is; absent is fine.
Result<bool> remove_if_there(int dir, const std::string& name, const std::string& shown) {
  struct stat st{};
  if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return false;
    return fail(sys_error("stat " + shown));
  }
  if (S_ISDIR(st.st_mode)) NSBOX_CHECK(files::remove_tree_at(dir, name, shown));
  else if (::unlinkat(dir, name.c_str(), 0) != 0) return fail(sys_error("remove " + shown));
  return true;
}

class Merger {
 public:
  MergeSummary summary;
  // Directories' modes and times, the upper layer's winning, set once every layer is in:
  // a lower layer's 0555 directory must still take an upper layer's names.
  std::map<std::string, struct stat> dir_meta;

  Result<void> set_dir_meta(int out) {
    for (auto it = dir_meta.rbegin(); it != dir_meta.rend(); ++it) {  // children before their parents
      open_how how{};
      how.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
      how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
      UniqueFd dir(static_cast<int>(::syscall(SYS_openat2, out, it->first.c_str(), &how, sizeof how)));
      if (!dir) continue;  // removed or replaced by a later layer
      if (::fchmod(dir.get(), it->second.st_mode & 07777) != 0) return fail(sys_error("chmod " + it->first));
      const timespec times[2] = {it->second.st_atim, it->second.st_mtim};
      if (::futimens(dir.get(), times) != 0) return fail(sys_error("set the times of " + it->first));
    }
    return {};
  }

  // The layer's directory `from` onto the tree's `to`; `shown` is their path ("" at the root).
  Result<void> apply(int from, int to, const std::string& shown, int depth) {
    if (depth > kMaxDepth) return fail(make_error(ErrorCode::kInvalidArgument, "the layer nests deeper than " + std::to_string(kMaxDepth)));
    auto names = NSBOX_TRY(files::list_dir_at(from, shown.empty() ? "the layer" : shown));
    std::sort(names.begin(), names.end());
    // Whiteouts first: they concern the layers below only, never this one's own names.
    if (std::find(names.begin(), names.end(), kOpaque) != names.end())
      for (const auto& name : NSBOX_TRY(files::list_dir_at(to, shown.empty() ? "the tree" : shown)))
        if (NSBOX_TRY(remove_if_there(to, name, path(shown, name)))) ++summary.removed;
    for (const auto& name : names) {
      if (name == kOpaque || !name.starts_with(kWhiteout)) continue;
      std::string target = name.substr(kWhiteout.size());
      if (target.empty() || target == "." || target == "..") continue;
      if (NSBOX_TRY(remove_if_there(to, target, path(shown, target)))) ++summary.removed;
    }
    for (const auto& name : names) {
      if (name.starts_with(kWhiteout)) continue;
      std::string here = path(shown, name);
      struct stat st{};
      if (::fstatat(from, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return fail(sys_error("stat " + here));
      ++summary.entries;
      if (!S_ISDIR(st.st_mode)) {
        NSBOX_CHECK(remove_if_there(to, name, here));
        if (::linkat(from, name.c_str(), to, name.c_str(), 0) != 0) return fail(sys_error("link " + here));
        continue;
      }
      struct stat there{};
      bool is_dir = ::fstatat(to, name.c_str(), &there, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(there.st_mode);
      if (!is_dir) {
        NSBOX_CHECK(remove_if_there(to, name, here));
        if (::mkdirat(to, name.c_str(), 0700) != 0) return fail(sys_error("mkdir " + here));
      }
      UniqueFd sub_from = NSBOX_TRY(open_dir_at(from, name, here));
      UniqueFd sub_to = NSBOX_TRY(open_dir_at(to, name, here));
      NSBOX_CHECK(apply(sub_from.get(), sub_to.get(), here, depth + 1));
      dir_meta[here] = st;
    }
    return {};
  }

 private:
  static std::string path(const std::string& shown, const std::string& name) { return shown.empty() ? name : shown + "/" + name; }
};

}  // namespace

Result<MergeSummary> merge(const std::vector<int>& layers, int out) {
  Merger m;
  for (int layer : layers) NSBOX_CHECK(m.apply(layer, out, "", 0));
  NSBOX_CHECK(m.set_dir_meta(out));
  if (!layers.empty()) {
    struct stat st{};
    if (::fstat(layers.back(), &st) == 0) (void)::fchmod(out, st.st_mode & 07777);
  }
  return m.summary;
}

}  // namespace nsbox::image_tree
