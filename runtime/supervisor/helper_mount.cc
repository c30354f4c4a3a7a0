#include "runtime/supervisor/helper_mount.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "isolation/sys/files.h"
#include "isolation/sys/mountinfo.h"
#include "isolation/sys/syscall.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox {
namespace {

constexpr auto kMountTimeout = std::chrono::milliseconds(kHelperMountTimeoutMs);

// The tool's secret files, from before the first is written until the guard goes: every
// way out of start_helper_mount removes them.
class SecretFiles {
 public:
  explicit SecretFiles(const bucket::HelperCommand& command) : command_(command) {}
  ~SecretFiles() { remove(); }
  SecretFiles(const SecretFiles&) = delete;
  SecretFiles& operator=(const SecretFiles&) = delete;

  Result<void> write() {
    for (const auto& [path, content] : command_.secret_files) {
      UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
      if (!fd) return fail(sys_error("create " + path));
      NSBOX_CHECK(files::write_all(fd.get(), content, path));
    }
    return {};
  }
  void remove() {
    for (const auto& [path, content] : command_.secret_files) ::unlink(path.c_str());
  }

 private:
  const bucket::HelperCommand& command_;
};

// From mountinfo, not stat(): a stat of a mount whose server hangs would hang too.
bool is_mount_point(const std::string& path) {
  auto mounts = sys::own_mounts();
  if (!mounts) return false;
  for (const auto& m : *mounts)
    if (m.mount_point == path) return true;
  return false;
}

std::string log_tail(const std::string& log_path, const bucket::BucketCredentials& credentials) {
  std::string text = files::read_file(log_path).value_or("");
  if (text.size() > 600) text = "..." + text.substr(text.size() - 600);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  for (char& c : text)
    if (c == '\n') c = ' ';
  return bucket::redact(text, credentials);
}

}  // namespace

Result<HelperProcess> start_helper_mount(const bucket::HelperCommand& command, const std::string& log_path,
                                         const std::string& mountpoint, const bucket::BucketCredentials& credentials,
                                         const std::string& what) {
  SecretFiles secrets(command);
  if (auto written = secrets.write(); !written) return fail(std::move(written.error()).context(what));
  UniqueFd log(::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!log) return fail(sys_error("open " + log_path).context(what));
  std::string name = command.argv[0];
  // Its environment is the command's own (external_helpers.cc builds it).
  auto helper = NSBOX_TRY(HelperProcess::start(
      {command.program, command.argv, {-1, log.get(), log.get()}, command.environment, what + " (" + name + ")"}));
  auto deadline = std::chrono::steady_clock::now() + kMountTimeout;
  for (;;) {
    if (std::string how = helper.reap(); !how.empty())
      return fail(make_error(ErrorCode::kRemote, what + ": " + name + " " + how + ": " + log_tail(log_path, credentials)));
    if (is_mount_point(mountpoint)) break;
    if (std::chrono::steady_clock::now() > deadline) {
      helper.stop(0);
      return fail(make_error(ErrorCode::kTimeout, what + ": " + name + " did not mount within " +
                                                      std::to_string(kHelperMountTimeoutMs / 1000) + " s: " +
                                                      log_tail(log_path, credentials)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return helper;  // the secret files go with `secrets`: read at start-up, not needed again
}

}  // namespace nsbox
