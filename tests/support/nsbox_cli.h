// Driving the real `nsbox` binary from tests, each test with its own state root.
//
//   TestRoot root;                       // /tmp/nsbox-test-XXXXXX, removed with its sandboxes
//   auto id = root.create({"--size", "medium"});
//   auto r = root.sh(id, "id -u");       // bash -c inside the sandbox
//   CHECK(r.out == "1000\n");
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/process.h"

namespace nsbox::test {

// The `nsbox` to run: the product's, or where a test hook is set (NSBOX_TEST_RESOLVE,
// NSBOX_TEST_NETNS, NSBOX_TEST_KERNEL_ZYGOTE, in this process's environment or
// `extra_env`, even empty) nsbox-with-test-hooks, the same command line reading them
// (tests/support/nsbox_with_test_hooks.cc). The product reads none.
std::string nsbox_binary(const std::vector<std::string>& extra_env = {});
std::string probe_binary();

// A program that runs while the test acts on it: its output is collected as it comes, so
// that the test can wait for a line it prints (a marker: never a fixed sleep), write to
// its stdin, signal it, then wait for its end. Its own process group; killed with it
// (SIGKILL) if still running when the object goes.
class BackgroundProcess {
 public:
  // As run_process: `options.as`, `extra_env` (proxies dropped), and `timeout_s` as the
  // default bound of wait(). stdin is a pipe when `options.stdin_is_null` is false.
  explicit BackgroundProcess(const std::vector<std::string>& argv, const ProcessOptions& options = {});
  ~BackgroundProcess();
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Until `text` appears in its stdout or stderr (true), or it has closed both, or
  // `timeout_s` passed (false).
  bool wait_for_output(const std::string& text, int timeout_s = 60);
  // Its stdout and stderr so far, for a test's INFO.
  std::string output() const;
  void write_stdin(const std::string& data);
  void close_stdin();
  // kill(pid, sig): the program itself, not its group.
  bool signal(int sig) const;
  // Whether it exits within `timeout_s` (it is not reaped, nor killed if it does not).
  bool exited_within(int timeout_s) const;
  // Until it exits; past `timeout_s` (its options' by default) its group is killed and
  // the result says timed_out.
  ProcessResult wait(std::optional<int> timeout_s = std::nullopt);

 private:
  void collect(int out_fd, int err_fd);
  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  int timeout_s_ = 120;
  bool waited_ = false;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::string out_, err_;
  bool closed_ = false;  // both output pipes at EOF
  std::thread reader_;
  ProcessResult result_;
};

class TestRoot {
 public:
  explicit TestRoot(std::optional<RunAs> as = std::nullopt);
  ~TestRoot();
  TestRoot(const TestRoot&) = delete;
  TestRoot& operator=(const TestRoot&) = delete;

  const std::string& path() const { return path_; }

  // nsbox --root <path> ARGS...
  ProcessResult nsbox(const std::vector<std::string>& args, const ProcessOptions& options = {}) const;
  // Parses stdout as the one JSON document of a --json command.
  static nlohmann::json json(const ProcessResult& r);

  // `nsbox VERB... FLAGS... -- COMMAND...` (spawn, pty start): REQUIREs success and returns
  // the first line it printed (the pid or session it started).
  std::string start_command(const std::vector<std::string>& verb, const std::vector<std::string>& flags,
                            const std::vector<std::string>& command) const;
  // Creates a sandbox (REQUIREs success) and returns its id.
  std::string create(const std::vector<std::string>& extra = {}, const ProcessOptions& options = {});
  // nsbox --root <path> ARGS..., running in the background.
  std::unique_ptr<BackgroundProcess> start(const std::vector<std::string>& args, const ProcessOptions& options = {}) const;
  // `nsbox exec --json ID -c CODE FLAGS...`: the cell's result (REQUIREs a JSON answer).
  nlohmann::json cell(const std::string& id, const std::string& code, const std::vector<std::string>& flags = {}) const;
  // What the host side logged for a sandbox, concatenated: its supervisor's log, its tool
  // bridge's (tools.log) and each bucket server's (buckets/N.log), with their rotated
  // predecessors (.1).
  std::string logs(const std::string& id) const;
  // In the zygote rerun (set_run_wide_zygote): checks where the kernels of `ids` came from.
  void check_kernel_origins(const std::vector<std::string>& ids) const;
  // Runs a bash command line in the sandbox.
  ProcessResult sh(const std::string& id, const std::string& command_line, const std::vector<std::string>& flags = {},
                   const ProcessOptions& options = {}) const;
  // Uploads the probe binary into the sandbox's /mnt/files (as /mnt/files/probe).
  void install_probe(const std::string& id) const;
  // A file of the sandbox's /mnt/files, read through `nsbox files ID download PATH -`
  // (`path` may start with /mnt/files/).
  std::string download(const std::string& id, const std::string& path) const;
  // Waits inside the sandbox, up to `timeout_s`, until `path` exists there (a marker the
  // sandbox's code leaves); whether it did.
  bool wait_for_file(const std::string& id, const std::string& path, int timeout_s = 60) const;

 private:
  std::string path_;
  std::optional<RunAs> as_;
  std::string binary_;  // a copy the other user can reach; empty: nsbox_binary() of each call's environment
};

// A second state root on a disk of its own, small (a tmpfs of `size`, e.g. "3g"), under
// `parent`: for what happens when a disk fills. Its sandboxes are removed before the disk
// goes.
class SmallDisk {
 public:
  SmallDisk(const TestRoot& parent, const std::string& size);
  ~SmallDisk();
  SmallDisk(const SmallDisk&) = delete;
  SmallDisk& operator=(const SmallDisk&) = delete;

  const std::string& path() const { return path_; }
  // nsbox --root <path> ARGS..., with `env` added to its environment.
  ProcessResult nsbox(std::vector<std::string> args, const std::vector<std::string>& env = {}) const;

 private:
  std::string path_;
};

// The running processes nsbox started for the state whose data directory is `data_dir`
// (supervisors, and what they forked), and a bounded wait (seconds) for them to be gone.
std::vector<pid_t> processes_of(const std::string& data_dir);
bool wait_for_processes_of(const std::string& data_dir, int timeout_s);

// A file a volume store keeps for itself in its directory, not any sandbox's: the
// formatted image new volumes are copied from.
inline bool is_store_image(const std::string& name) { return name.starts_with(".template-"); }

// The host-side test user for rootless tests (created by the CTest fixture).
std::optional<RunAs> rootless_user();

// The zygote rerun (NSBOX_TEST_ALL_KERNELS_FROM_ZYGOTE=1, tests/integration/
// kernel_zygote_test.cc): `pid_of` says which zygote serves the whole run now. While one
// is set, a TestRoot checks every sandbox of its own user before `rm` removes it (and
// before its end): its kernel came from that zygote (the kernel's parent is the zygote),
// or the sandbox says why not and the reason is one a test chose (a variable read at the
// kernel's start, memory merging). A fallback to init fails the test.
void set_run_wide_zygote(pid_t (*pid_of)());

}  // namespace nsbox::test
