#include "runtime/toolbridge/shared_files.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ctime>

#include "isolation/sys/files.h"
#include "isolation/sys/rfc3339.h"
#include "isolation/sys/syscall.h"

namespace nsbox::tools {
namespace {

using protocol::Json;

constexpr const char* kVolume = "/mnt/files/";
constexpr const char* kUploadStaging = ".nsbox/uploads/";

// Names no sandbox can guess or collide with: each file its own directory.
std::string random_dir() { return sys::random_hex(6); }

}  // namespace

Result<Json> SharedFiles::upload_one(const std::string& given) {
  std::string path = NSBOX_TRY(SandboxFs::normalize(given));
  std::string name = path.substr(path.rfind('/') + 1);
  std::string relative;
  bool in_volume = path.rfind(kVolume, 0) == 0 && path.compare(std::strlen(kVolume), std::strlen(kUploadStaging), kUploadStaging) != 0;
  struct stat st{};
  if (in_volume) {
    relative = path.substr(std::strlen(kVolume));
  } else {
    UniqueFd source = NSBOX_TRY(fs_.open_read(path, &st));
    if (!S_ISREG(st.st_mode)) return fail(make_error(ErrorCode::kInvalidArgument, path + " is not a regular file"));
    relative = ".nsbox/shared/" + random_dir() + "/" + name;
    NSBOX_TRY(fs_.write(kVolume + relative, source.get(), static_cast<uint64_t>(st.st_size) + 1, 0644));
  }
  UniqueFd shared = NSBOX_TRY(fs_.open_read(kVolume + relative, &st));
  if (!S_ISREG(st.st_mode)) return fail(make_error(ErrorCode::kInvalidArgument, path + " is not a regular file"));
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (links_.signer) {
    int64_t expires = static_cast<int64_t>(std::time(nullptr)) + kLinkSeconds;
    return Json{{"url", links_.link_base + links_.signer->link(links_.sandbox_id, relative, expires)},
                {"expires_at", sys::rfc3339(expires)}, {"mount_relative_path", relative},
                {"sandbox_path", kVolume + relative}, {"size", size}};
  }
  return host_copy(path, relative, std::move(shared), size);
}

Result<Json> SharedFiles::host_copy(const std::string& path, const std::string& relative, UniqueFd shared, uint64_t size) {
  // Reserved before the copy: calls from many threads never overrun the budget together.
  if (used_.fetch_add(size) + size > budget_) {
    used_.fetch_sub(size);
    return fail(make_error(ErrorCode::kLimitExceeded,
                           path + ": the sandbox's shared copies would pass their budget of " + std::to_string(budget_ >> 20) + " MiB",
                           "the file is at /mnt/files/" + relative + "; fetch it with `nsbox files ID download " + relative + "`"));
  }
  std::string dir = links_.host_dir + "/" + random_dir();
  std::string host_path = dir + "/" + relative.substr(relative.rfind('/') + 1);
  auto copy = [&]() -> Result<void> {
    NSBOX_CHECK(files::ensure_private_dir(links_.host_dir));
    if (::mkdir(dir.c_str(), 0700) != 0) return fail(sys_error("mkdir " + dir));
    UniqueFd out(::open(host_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!out) return fail(sys_error("create " + host_path));
    NSBOX_TRY(files::copy_sparse(shared.get(), out.get(), size, kVolume + relative, host_path));
    return {};
  };
  if (auto copied = copy(); !copied) {
    used_.fetch_sub(size);
    ::unlink(host_path.c_str());
    ::rmdir(dir.c_str());
    return fail(std::move(copied.error()));
  }
  return Json{{"url", "file://" + host_path}, {"expires_at", nullptr}, {"mount_relative_path", relative},
              {"sandbox_path", kVolume + relative}, {"size", size}};
}

ToolAnswer SharedFiles::upload(const Json& args) {
  const Json paths = args.value("paths", Json());
  if (!paths.is_array() || paths.empty() || paths.size() > kMaxPaths)
    return ToolAnswer::failed("upload_local_file: give from 1 to " + std::to_string(kMaxPaths) + " paths");
  Json results = Json::array();
  for (const Json& p : paths) {
    if (!p.is_string()) return ToolAnswer::failed("upload_local_file: a path must be a string");
    auto one = upload_one(p.get<std::string>());
    if (!one) return ToolAnswer::failed("upload_local_file: " + one.error().message + (one.error().hint.empty() ? "" : " (" + one.error().hint + ")"));
    results.push_back(std::move(*one));
  }
  return ToolAnswer::ok(results.size() == 1 ? results[0] : results);
}

}  // namespace nsbox::tools
