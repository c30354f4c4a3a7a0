#include "runtime/supervisor/helper_mount.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "isolation/sys/child_fds.h"
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

[[noreturn]] void exec_helper(const bucket::HelperCommand& command, pid_t supervisor, int log_fd, char* const argv[],
                              char* const envp[]) {
  sys::prepare_child(supervisor, {-1, log_fd, log_fd});
  ::execve(command.program.c_str(), argv, envp);
  ::_exit(127);
}

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

Result<pid_t> start_helper_mount(const bucket::HelperCommand& command, const std::string& log_path,
                                 const std::string& mountpoint, const bucket::BucketCredentials& credentials,
                                 const std::string& what) {
  SecretFiles secrets(command);
  if (auto written = secrets.write(); !written) return fail(std::move(written.error()).context(what));
  UniqueFd log(::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!log) return fail(sys_error("open " + log_path).context(what));
  // Built before fork: the child only calls what is async-signal-safe.
  std::vector<char*> argv, envp;
  for (const auto& a : command.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : command.environment) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  pid_t supervisor = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return fail(sys_error("fork " + command.argv[0]).context(what));
  if (pid == 0) exec_helper(command, supervisor, log.get(), argv.data(), envp.data());

  std::string name = command.argv[0];
  auto deadline = std::chrono::steady_clock::now() + kMountTimeout;
  for (;;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      std::string how = WIFEXITED(status) ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                          : "was killed by signal " + std::to_string(WTERMSIG(status));
      return fail(make_error(ErrorCode::kRemote, what + ": " + name + " " + how + ": " + log_tail(log_path, credentials)));
    }
    if (is_mount_point(mountpoint)) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      return fail(make_error(ErrorCode::kTimeout, what + ": " + name + " did not mount within " +
                                                      std::to_string(kHelperMountTimeoutMs / 1000) + " s: " +
                                                      log_tail(log_path, credentials)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pid;  // the secret files go with `secrets`: read at start-up, not needed again
}

}  // namespace nsbox
