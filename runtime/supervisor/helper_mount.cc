#include "runtime/supervisor/helper_mount.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "isolation/sys/files.h"
#include "isolation/sys/syscall.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox {
namespace {

constexpr auto kMountTimeout = std::chrono::seconds(30);

Result<void> write_secret_files(const bucket::HelperCommand& command) {
  for (const auto& [path, content] : command.secret_files) {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd) return fail(sys_error("create " + path));
    NSBOX_CHECK(files::write_all(fd.get(), content, path));
  }
  return {};
}

void remove_secret_files(const bucket::HelperCommand& command) {
  for (const auto& [path, content] : command.secret_files) ::unlink(path.c_str());
}

[[noreturn]] void exec_helper(const bucket::HelperCommand& command, int log_fd) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  int null_fd = ::open("/dev/null", O_RDONLY);
  ::dup2(null_fd, STDIN_FILENO);
  ::dup2(log_fd, STDOUT_FILENO);
  ::dup2(log_fd, STDERR_FILENO);
  sys::close_range(3, ~0U, 0);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  std::vector<char*> argv, envp;
  for (const auto& a : command.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : command.environment) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  ::execve(command.program.c_str(), argv.data(), envp.data());
  ::_exit(127);
}

// From mountinfo, not stat(): a stat of a mount whose server hangs would hang too.
bool is_mount_point(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // id parent major:minor root MOUNTPOINT ...
    size_t at = 0;
    for (int field = 0; field < 4 && at != std::string::npos; ++field) at = line.find(' ', at + 1);
    if (at == std::string::npos) continue;
    size_t end = line.find(' ', at + 1);
    if (line.compare(at + 1, end - at - 1, path) == 0) return true;
  }
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
  auto written = write_secret_files(command);
  if (!written) {
    remove_secret_files(command);
    return fail(std::move(written.error()).context(what));
  }
  UniqueFd log(::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!log) return fail(sys_error("open " + log_path).context(what));
  pid_t pid = ::fork();
  if (pid < 0) return fail(sys_error("fork " + command.argv[0]).context(what));
  if (pid == 0) exec_helper(command, log.get());

  std::string name = command.argv[0];
  auto deadline = std::chrono::steady_clock::now() + kMountTimeout;
  for (;;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      remove_secret_files(command);
      std::string how = WIFEXITED(status) ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                          : "was killed by signal " + std::to_string(WTERMSIG(status));
      return fail(make_error(ErrorCode::kRemote, what + ": " + name + " " + how + ": " + log_tail(log_path, credentials)));
    }
    if (is_mount_point(mountpoint)) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      remove_secret_files(command);
      return fail(make_error(ErrorCode::kTimeout, what + ": " + name + " did not mount within 30 s: " +
                                                      log_tail(log_path, credentials)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  remove_secret_files(command);  // read at start-up; not needed again
  return pid;
}

}  // namespace nsbox
