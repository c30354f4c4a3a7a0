#include "tests/support/nsbox_cli.h"

#include "isolation/sys/files.h"

#include <sys/mount.h>

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>

extern char** environ;

namespace nsbox::test {

namespace {

constexpr std::string_view kTestHooks[] = {"NSBOX_TEST_RESOLVE", "NSBOX_TEST_NETNS", "NSBOX_TEST_KERNEL_ZYGOTE"};

bool sets_test_hook(const std::vector<std::string>& extra_env) {
  for (std::string_view hook : kTestHooks) {
    if (std::getenv(std::string(hook).c_str())) return true;
    for (const auto& entry : extra_env)
      if (entry.size() > hook.size() && entry.starts_with(hook) && entry[hook.size()] == '=') return true;
  }
  return false;
}

}  // namespace

std::string nsbox_binary(const std::vector<std::string>& extra_env) {
  return sets_test_hook(extra_env) ? NSBOX_TEST_HOOKS_BIN : NSBOX_TEST_BIN;
}
std::string probe_binary() { return NSBOX_TEST_PROBE; }

namespace {

// The build tree may sit where another user cannot go (a checkout under /root): give the
// rootless tests their own world-readable copy of the installed layout.
std::string stage_install_copy(const std::string& root) {
  namespace fs = std::filesystem;
  fs::path bin = fs::path(NSBOX_TEST_BIN);
  fs::path libexec = bin.parent_path().parent_path() / "libexec" / "nsbox";
  fs::path dest = fs::path(root) / "install";
  fs::create_directories(dest / "bin");
  fs::create_directories(dest / "libexec");
  fs::copy_file(bin, dest / "bin" / "nsbox");
  fs::copy(libexec, dest / "libexec" / "nsbox", fs::copy_options::recursive);
  for (const auto& e : fs::recursive_directory_iterator(dest))
    fs::permissions(e.path(), e.is_directory() || (e.status().permissions() & fs::perms::owner_exec) != fs::perms::none
                                  ? fs::perms(0755) : fs::perms(0644));
  fs::permissions(dest, fs::perms(0755));
  return dest / "bin" / "nsbox";
}

// The test's environment without proxy settings, with `extra` (K=V) replacing or adding,
// as run_process builds it.
std::vector<std::string> child_environment(const std::vector<std::string>& extra) {
  auto name_of = [](std::string_view entry) { return entry.substr(0, entry.find('=')); };
  auto proxy = [](std::string_view name) {
    for (std::string_view p : {"http_proxy", "https_proxy", "all_proxy", "no_proxy"})
      if (name.size() == p.size() && ::strncasecmp(name.data(), p.data(), name.size()) == 0) return true;
    return false;
  };
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string_view name = name_of(*e);
    bool replaced = std::any_of(extra.begin(), extra.end(), [&](const std::string& x) { return name_of(x) == name; });
    if (!replaced && !proxy(name)) env.emplace_back(*e);
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

}  // namespace

std::vector<pid_t> processes_of(const std::string& data_dir) {
  // Supervisors are started as `nsbox-supervisor --run-dir R --data-dir D`, and their
  // children (the bucket mounts' servers, helpers) keep that command line.
  const std::string needle = std::string("--data-dir") + '\0' + data_dir + '\0';
  std::vector<pid_t> pids;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    std::string name = e.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string proc = e.path().string();
    // A process may exit between the listing and the read: then read(2) says ESRCH (which
    // an ifstream turns into an exception, in a destructor: an abort). It is gone: skip it.
    auto args = files::read_file(proc + "/cmdline", 1 << 20);
    if (!args || args->find(needle) == std::string::npos) continue;
    auto stat = files::read_file(proc + "/stat", 1 << 16);
    if (!stat) continue;
    const std::string& text = *stat;
    auto close = text.rfind(')');
    if (close != std::string::npos && close + 2 < text.size() && text[close + 2] == 'Z') continue;  // exited
    pids.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return pids;
}

bool wait_for_processes_of(const std::string& data_dir, int timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (!processes_of(data_dir).empty()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

BackgroundProcess::BackgroundProcess(const std::vector<std::string>& argv, const ProcessOptions& options)
    : timeout_s_(options.timeout_s) {
  std::vector<std::string> environment = child_environment(options.extra_env);
  std::vector<char*> envp, args;
  for (auto& e : environment) envp.push_back(e.data());
  envp.push_back(nullptr);
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  bool with_stdin = !options.stdin_is_null || !options.stdin_data.empty();
  int in[2] = {-1, -1}, out[2], err[2];
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(err, O_CLOEXEC) == 0);
  if (with_stdin) REQUIRE(::pipe2(in, O_CLOEXEC) == 0);
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  pid_t pid = ::fork();
  if (pid == 0) {  // only async-signal-safe calls from here
    ::setpgid(0, 0);
    // The test may ignore SIGPIPE (to survive a reader that went away); an ignored signal
    // would stay ignored across exec and change how the program ends.
    struct sigaction default_action{};
    default_action.sa_handler = SIG_DFL;
    ::sigaction(SIGPIPE, &default_action, nullptr);
    if (::dup2(with_stdin ? in[0] : null_fd, 0) < 0 || ::dup2(out[1], 1) < 0 || ::dup2(err[1], 2) < 0) ::_exit(126);
    if (options.as && (::setgroups(0, nullptr) || ::setresgid(options.as->gid, options.as->gid, options.as->gid) ||
                       ::setresuid(options.as->uid, options.as->uid, options.as->uid)))
      ::_exit(126);
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  ::close(null_fd);
  ::close(out[1]);
  ::close(err[1]);
  if (with_stdin) ::close(in[0]);
  if (pid < 0) {
    ::close(out[0]);
    ::close(err[0]);
    if (with_stdin) ::close(in[1]);
    FAIL("fork: " << std::strerror(errno));
  }
  ::setpgid(pid, pid);
  pid_ = pid;
  stdin_fd_ = with_stdin ? in[1] : -1;
  if (!options.stdin_data.empty()) write_stdin(options.stdin_data);
  reader_ = std::thread([this, o = out[0], e = err[0]] { collect(o, e); });
}

void BackgroundProcess::collect(int out_fd, int err_fd) {
  pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0) {
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      std::lock_guard lock(mutex_);
      if (n <= 0) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      } else {
        (i == 0 ? out_ : err_).append(buf, static_cast<size_t>(n));
      }
      changed_.notify_all();
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) ::close(f.fd);
  std::lock_guard lock(mutex_);
  closed_ = true;
  changed_.notify_all();
}

bool BackgroundProcess::wait_for_output(const std::string& text, int timeout_s) {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, std::chrono::seconds(timeout_s), [&] {
    return closed_ || out_.find(text) != std::string::npos || err_.find(text) != std::string::npos;
  });
  return out_.find(text) != std::string::npos || err_.find(text) != std::string::npos;
}

std::string BackgroundProcess::output() const {
  std::lock_guard lock(mutex_);
  return "stdout: " + out_ + "\nstderr: " + err_;
}

void BackgroundProcess::write_stdin(const std::string& data) {
  REQUIRE(stdin_fd_ >= 0);
  ::signal(SIGPIPE, SIG_IGN);
  for (size_t at = 0; at < data.size();) {
    ssize_t n = ::write(stdin_fd_, data.data() + at, data.size() - at);
    if (n < 0 && errno == EINTR) continue;
    REQUIRE(n > 0);
    at += static_cast<size_t>(n);
  }
}

void BackgroundProcess::close_stdin() {
  if (stdin_fd_ >= 0) ::close(stdin_fd_);
  stdin_fd_ = -1;
}

bool BackgroundProcess::signal(int sig) const { return ::kill(pid_, sig) == 0; }

bool BackgroundProcess::exited_within(int timeout_s) const {
  if (waited_) return true;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  for (;;) {
    siginfo_t info{};
    if (::waitid(P_PID, pid_, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid_) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

ProcessResult BackgroundProcess::wait(std::optional<int> timeout_s) {
  if (waited_) return result_;
  waited_ = true;
  close_stdin();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s.value_or(timeout_s_));
  for (;;) {
    // Not reaped yet (WNOWAIT), so that its process group id cannot have been reused below.
    siginfo_t info{};
    int rc = ::waitid(P_PID, pid_, &info, WEXITED | WNOHANG | WNOWAIT);
    if (rc == 0 && info.si_pid == pid_) break;
    if (rc != 0 && errno != EINTR) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      result_.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // What it left running in its group would hold the pipes open: it goes too.
  ::kill(-pid_, SIGKILL);
  if (result_.timed_out) ::kill(pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {}
  reader_.join();
  result_.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::lock_guard lock(mutex_);
  result_.out = out_;
  result_.err = err_;
  return result_;
}

BackgroundProcess::~BackgroundProcess() {
  if (waited_ || pid_ < 0) return;
  ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);
  wait(60);
}

namespace {

pid_t (*g_run_wide_zygote)() = nullptr;

// The kernels of the sandbox whose init is `init_pid` (host pids): the processes of its pid
// namespace running /opt/nsbox/nsbox-kernel.
std::vector<pid_t> kernels_of(pid_t init_pid) {
  std::vector<pid_t> out;
  char ns[64] = {}, theirs[64] = {};
  if (::readlink(("/proc/" + std::to_string(init_pid) + "/ns/pid").c_str(), ns, sizeof ns - 1) <= 0) return out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    std::string name = e.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::fill(std::begin(theirs), std::end(theirs), '\0');
    if (::readlink((e.path().string() + "/ns/pid").c_str(), theirs, sizeof theirs - 1) <= 0 || std::strcmp(ns, theirs) != 0) continue;
    auto args = files::read_file(e.path().string() + "/cmdline", 1 << 16);
    if (args && args->starts_with(std::string("/opt/nsbox/nsbox-kernel") + '\0')) out.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return out;
}

pid_t parent_of(pid_t pid) {
  auto status = files::read_file("/proc/" + std::to_string(pid) + "/status", 1 << 16);
  if (!status) return -1;
  auto at = status->find("\nPPid:\t");
  return at == std::string::npos ? -1 : static_cast<pid_t>(std::atol(status->c_str() + at + 7));
}

}  // namespace

void set_run_wide_zygote(pid_t (*pid_of)()) { g_run_wide_zygote = pid_of; }

void TestRoot::check_kernel_origins(const std::vector<std::string>& ids) const {
  if (!g_run_wide_zygote || as_) return;  // a zygote serves its own user's supervisors only
  for (const auto& id : ids) {
    auto inspected = nsbox({"inspect", "--json", id});
    if (inspected.exit_code != 0) continue;  // no such sandbox: the rm itself says so
    auto info = json(inspected);
    if (info.value("status", "") != "running") continue;
    std::string origin = info.value("kernel_origin", ""), why = info.value("kernel_zygote_fallback", "");
    INFO("sandbox " << id << "'s kernel: " << (origin.empty() ? "none started" : origin) << (why.empty() ? "" : ": " + why));
    if (origin == "init") {
      CHECK((why.starts_with("its environment sets ") || why.starts_with("memory merging")));  // what the test chose
      continue;
    }
    pid_t zygote = g_run_wide_zygote();
    for (pid_t kernel : kernels_of(info.value("init_pid", 0))) {
      INFO("kernel pid " << kernel << ", the zygote's pid " << zygote);
      pid_t parent = parent_of(kernel);
      if (parent >= 0) CHECK(parent == zygote);  // -1: it has just ended
    }
  }
}

TestRoot::TestRoot(std::optional<RunAs> as) : as_(as) {
  char tmpl[] = "/tmp/nsbox-test-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  path_ = tmpl;
  if (!as_) return;
  try {
    REQUIRE(::chmod(path_.c_str(), 0755) == 0);
    binary_ = stage_install_copy(path_);
    REQUIRE(::chown(path_.c_str(), as_->uid, as_->gid) == 0);
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);  // no destructor runs for a failed constructor
    throw;
  }
}

TestRoot::~TestRoot() {
  // Remove whatever the test left running, then the root itself.
  auto ls = nsbox({"ls", "--json"});
  if (ls.exit_code == 0) {
    auto doc = nlohmann::json::parse(ls.out, nullptr, false);
    if (!doc.is_discarded())
      for (const auto& sb : doc.value("sandboxes", nlohmann::json::array())) nsbox({"rm", sb.value("id", "")});
  }
  // A supervisor (and what it forked) can outlive `rm` by a moment; one still writing
  // would put files back into a root being removed.
  wait_for_processes_of(path_ + "/data", 60);
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

ProcessResult TestRoot::nsbox(const std::vector<std::string>& args, const ProcessOptions& options) const {
  if (g_run_wide_zygote && !args.empty() && args.front() == "rm") {
    std::vector<std::string> ids;
    for (size_t i = 1; i < args.size(); ++i)
      if (!args[i].starts_with("-")) ids.push_back(args[i]);
    check_kernel_origins(ids);
  }
  std::vector<std::string> argv = {binary_.empty() ? nsbox_binary(options.extra_env) : binary_, "--root", path_};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcessOptions o = options;
  if (as_ && !o.as) o.as = as_;
  return run_process(argv, o);
}

std::string TestRoot::start_command(const std::vector<std::string>& verb, const std::vector<std::string>& flags,
                                    const std::vector<std::string>& command) const {
  std::vector<std::string> args = verb;
  args.insert(args.end(), flags.begin(), flags.end());
  args.push_back("--");
  args.insert(args.end(), command.begin(), command.end());
  auto r = nsbox(args);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return r.out.substr(0, r.out.find('\n'));
}

nlohmann::json TestRoot::json(const ProcessResult& r) {
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE_FALSE(j.is_discarded());
  return j;
}

nlohmann::json TestRoot::cell(const std::string& id, const std::string& code, const std::vector<std::string>& flags) const {
  std::vector<std::string> args = {"exec", "--json", id, "-c", code};
  args.insert(args.end(), flags.begin(), flags.end());
  auto r = nsbox(args, {.timeout_s = 120});
  INFO("cell: " << code << "\nstderr: " << r.err);
  return json(r);
}

std::string TestRoot::logs(const std::string& id) const {
  std::string dir = path_ + "/run/sandboxes/" + id;
  std::vector<std::string> files = {dir + "/supervisor.log.1", dir + "/supervisor.log", dir + "/tools.log.1",
                                    dir + "/tools.log"};
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/buckets", ec)) {
    std::string name = e.path().filename();
    if (name.ends_with(".log") || name.ends_with(".log.1")) files.push_back(e.path());
  }
  std::string all;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    all.append(std::istreambuf_iterator<char>(in), {});
  }
  return all;
}

std::string TestRoot::create(const std::vector<std::string>& extra, const ProcessOptions& options) {
  std::vector<std::string> args = {"create", "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto r = nsbox(args, options);
  INFO("create stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  return json(r).at("id").get<std::string>();
}

ProcessResult TestRoot::sh(const std::string& id, const std::string& command_line, const std::vector<std::string>& flags,
                           const ProcessOptions& options) const {
  std::vector<std::string> args = {"sh", id};
  args.insert(args.end(), flags.begin(), flags.end());
  args.push_back("--");
  args.push_back(command_line);
  return nsbox(args, options);
}

std::unique_ptr<BackgroundProcess> TestRoot::start(const std::vector<std::string>& args, const ProcessOptions& options) const {
  std::vector<std::string> argv = {binary_.empty() ? nsbox_binary(options.extra_env) : binary_, "--root", path_};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcessOptions o = options;
  if (as_ && !o.as) o.as = as_;
  return std::make_unique<BackgroundProcess>(argv, o);
}

bool TestRoot::wait_for_file(const std::string& id, const std::string& path, int timeout_s) const {
  std::string loops = std::to_string(timeout_s * 20);
  auto r = sh(id, "for i in $(seq " + loops + "); do [ -e '" + path + "' ] && exit 0; sleep 0.05; done; exit 1", {},
              {.timeout_s = timeout_s + 60});
  return r.exit_code == 0;
}

std::string TestRoot::download(const std::string& id, const std::string& path) const {
  std::string relative = path.rfind("/mnt/files/", 0) == 0 ? path.substr(11) : path;
  auto r = nsbox({"files", id, "download", relative, "-"});
  INFO("download " << path << ": " << r.err);
  REQUIRE(r.exit_code == 0);
  return r.out;
}

void TestRoot::install_probe(const std::string& id) const {
  std::string probe = probe_binary();
  if (as_) {  // the other user must be able to read it
    probe = path_ + "/install/probe";
    std::filesystem::copy_file(probe_binary(), probe, std::filesystem::copy_options::overwrite_existing);
    std::filesystem::permissions(probe, std::filesystem::perms(0755));
  }
  auto r = nsbox({"files", id, "upload", probe, "probe"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
}

std::optional<RunAs> rootless_user() {
  passwd* pw = ::getpwnam("nsbox-rootless");
  if (!pw) return std::nullopt;
  return RunAs{pw->pw_uid, pw->pw_gid};
}

SmallDisk::SmallDisk(const TestRoot& parent, const std::string& size) : path_(parent.path() + "/small-disk") {
  REQUIRE(::mkdir(path_.c_str(), 0700) == 0);
  REQUIRE(::mount("tmpfs", path_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, ("size=" + size + ",mode=0700").c_str()) == 0);
}

SmallDisk::~SmallDisk() {
  // The sandboxes first: they hold the images and mounts that live on the disk.
  auto ls = nlohmann::json::parse(nsbox({"ls", "--json"}).out, nullptr, false);
  if (!ls.is_discarded())
    for (const auto& sb : ls.value("sandboxes", nlohmann::json::array())) nsbox({"rm", sb.value("id", "")});
  wait_for_processes_of(path_ + "/data", 60);
  ::umount2(path_.c_str(), MNT_DETACH);
}

ProcessResult SmallDisk::nsbox(std::vector<std::string> args, const std::vector<std::string>& env) const {
  args.insert(args.begin(), {nsbox_binary(env), "--root", path_});
  return run_process(args, {.timeout_s = 120, .extra_env = env});
}

}  // namespace nsbox::test
