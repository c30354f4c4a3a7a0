#include "runtime/core/volume_skeleton.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "isolation/sys/files.h"
#include "isolation/sys/sha256.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox {

std::string skeleton_tag(const std::string& skeleton) {
  std::error_code ec;
  if (skeleton.empty() || !std::filesystem::is_directory(skeleton, ec)) return "";
  std::vector<std::string> entries;
  for (auto it = std::filesystem::recursive_directory_iterator(skeleton, ec); !ec && it != std::filesystem::end(it);
       it.increment(ec)) {
    std::string rel = std::filesystem::relative(it->path(), skeleton, ec).string();
    if (it->is_directory(ec)) {
      entries.push_back(rel + "/");
    } else if (auto content = files::read_file(it->path().string(), 16u << 20)) {  // small files: a font list
      entries.push_back(rel + " " + sha256_hex(*content));
    } else {
      return "";
    }
  }
  if (ec) return "";
  std::sort(entries.begin(), entries.end());
  std::string listing;
  for (const auto& e : entries) listing += e + "\n";
  return sha256_hex(listing).substr(0, 12);
}

Result<void> stage_skeleton(const std::string& skeleton, const std::string& stage, const userns::HostIds& ids) {
  auto own = [&](int fd, const std::string& path, mode_t mode) -> Result<void> {
    if (::fchown(fd, ids.uid, ids.gid) != 0) return fail(sys_error("chown " + path));
    if (::fchmod(fd, mode) != 0) return fail(sys_error("chmod " + path));
    return {};
  };
  auto make_dir = [&](const std::string& path) -> Result<void> {
    if (::mkdir(path.c_str(), 0700) != 0) return fail(sys_error("mkdir " + path));
    UniqueFd dir(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir) return fail(sys_error("open " + path));
    return own(dir.get(), path, 0755);
  };
  (void)files::remove_tree(stage);
  NSBOX_CHECK(make_dir(stage));
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(skeleton, ec); !ec && it != std::filesystem::end(it);
       it.increment(ec)) {
    std::string to = stage + "/" + std::filesystem::relative(it->path(), skeleton, ec).string();
    if (it->is_directory(ec)) {
      NSBOX_CHECK(make_dir(to));
    } else if (it->is_regular_file(ec)) {
      UniqueFd in(::open(it->path().c_str(), O_RDONLY | O_CLOEXEC));
      if (!in) return fail(sys_error("open " + it->path().string()));
      UniqueFd out(::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
      if (!out) return fail(sys_error("create " + to));
      NSBOX_CHECK(files::copy_stream(in.get(), out.get(), it->path().string(), to));
      NSBOX_CHECK(own(out.get(), to, 0644));
    }
  }
  if (ec) return fail(sys_error("read the home skeleton " + skeleton, ec.value()));
  return {};
}

}  // namespace nsbox
