// Kernels forked by the kernel zygote (`nsbox serve`'s by default, docs/kernel-zygote.md):
// each must be exactly what init's exec of nsbox-kernel makes, and hold nothing of the
// zygote's other sandboxes. The zygote runs in this test's process (the server's class,
// kernel/zygote_keeper/kernel_zygote_process.h); NSBOX_TEST_KERNEL_ZYGOTE hands its socket to the
// supervisors the CLI starts. A kernel from the zygote is told apart by its parent: the
// zygote is outside the sandbox's pid namespace, so getppid() is 0 (an exec'd kernel's
// parent is init, 1).
//
// With NSBOX_TEST_ALL_KERNELS_FROM_ZYGOTE=1 (the "zygote: " entries of CTest, the tests
// tagged [zygote]: `make test-kernel-zygote`, part of make test), the listener below
// starts one zygote for the whole run: every sandbox's kernel comes from it, and each
// TestRoot checks so before removing a sandbox (tests/support/nsbox_cli.h,
// set_run_wide_zygote: the kernel's parent is that zygote, or the sandbox says why not).
// Where the host has none (not root, Linux < 6.9) that run is a skip.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#define CATCH_CONFIG_EXTERNAL_INTERFACES  // the run-wide zygote's listener
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "isolation/sys/fd_passing.h"
#include "isolation/sys/syscall.h"
#include "runtime/core/install_layout.h"
#include "kernel/zygote_keeper/kernel_zygote_process.h"
#include "runtime/protocol/kernel_zygote.h"
#include "runtime/protocol/unix_socket.h"
#include "tests/support/host_features.h"
#include "tests/support/nsbox_cli.h"
#include "tests/support/temp_dir.h"

using namespace nsbox::test;

namespace {

constexpr const char* kSocketVariable = "NSBOX_TEST_KERNEL_ZYGOTE";

nsbox::Result<std::unique_ptr<nsbox::KernelZygoteProcess>> start_zygote(const std::string& dir,
                                                                          nsbox::KernelZygoteOptions options = {}) {
  auto layout = NSBOX_TRY(nsbox::InstallLayout::discover());
  return nsbox::KernelZygoteProcess::start(layout, dir, std::move(options));
}

// The whole run's zygote, when asked for.
class AllKernelsFromZygote : public Catch::TestEventListenerBase {
 public:
  using TestEventListenerBase::TestEventListenerBase;
  void testRunStarting(const Catch::TestRunInfo&) override {
    const char* wanted = std::getenv("NSBOX_TEST_ALL_KERNELS_FROM_ZYGOTE");
    if (!wanted || std::string(wanted) != "1") return;
    if (!kernel_zygote().present) {  // the whole run is a skip: its tests run without the zygote elsewhere
      std::cout << "SKIP: kernels from the zygote: " << kernel_zygote().absent_because << " [doctor: " << kernel_zygote().doctor << "]"
                << std::endl;
      std::exit(kSkipExitCode);
    }
    dir_ = std::make_unique<TempDir>("nsbox-zygote");
    auto started = start_zygote(dir_->path());
    if (!started) {
      std::cerr << "cannot start the kernel zygote: " << started.error().message << std::endl;
      std::exit(1);
    }
    zygote_ = std::move(*started);
    ::setenv(kSocketVariable, zygote_->socket_path().c_str(), 1);
    set_run_wide_zygote([] { return zygote_ ? zygote_->pid() : pid_t{0}; });
  }
  void testRunEnded(const Catch::TestRunStats&) override {
    set_run_wide_zygote(nullptr);
    zygote_.reset();
    dir_.reset();
  }

 private:
  std::unique_ptr<TempDir> dir_;
  static inline std::unique_ptr<nsbox::KernelZygoteProcess> zygote_;  // static: what set_run_wide_zygote's function reads
};

class ZygoteRoot : public TestRoot {
 public:
  explicit ZygoteRoot(nsbox::KernelZygoteOptions options = {}) {
    if (const char* outer = std::getenv(kSocketVariable)) previous_ = outer;
    auto started = start_zygote(path(), std::move(options));
    INFO((started ? "" : started.error().message));
    REQUIRE(started);
    zygote_ = std::move(*started);
    ::setenv(kSocketVariable, zygote_->socket_path().c_str(), 1);
  }
  ~ZygoteRoot() {
    if (previous_) ::setenv(kSocketVariable, previous_->c_str(), 1);
    else ::unsetenv(kSocketVariable);
  }

  pid_t zygote_pid() const { return zygote_->pid(); }
  int zygote_starts() const { return zygote_->starts(); }
  // Until the zygote serving is not `pid` (0: until one serves; a pid: until that one has
  // gone), at most 30 s.
  bool await_zygote_other_than(pid_t pid) const {
    for (int i = 0; i < 600; ++i) {
      pid_t now = zygote_->pid();
      if (now != pid && (pid != 0 || now != 0)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  void kill_zygote() {
    pid_t pid = zygote_->pid();
    REQUIRE(pid > 0);  // never kill(0): that is our whole process group
    ::kill(pid, SIGKILL);
  }

  // The zygote's children: the kernels it forked that are still alive.
  size_t zygote_children() const {
    std::ifstream f("/proc/" + std::to_string(zygote_->pid()) + "/task/" + std::to_string(zygote_->pid()) + "/children");
    size_t n = 0;
    for (std::string pid; f >> pid;) ++n;
    return n;
  }

 private:
  std::unique_ptr<nsbox::KernelZygoteProcess> zygote_;
  std::optional<std::string> previous_;
};

std::string random_hex(size_t bytes) { return nsbox::sys::random_hex(bytes); }

// Counts, in the kernel's own readable memory, the places where `first` is followed by
// `second`: the whole value never exists in the searching process (only its two halves).
std::string memory_search(const std::string& first_hex, const std::string& second_hex) {
  return "h1, h2 = bytes.fromhex('" + first_hex + "'), bytes.fromhex('" + second_hex + "')\n"
         "found = 0\n"
         "with open('/proc/self/maps') as maps, open('/proc/self/mem', 'rb', 0) as mem:\n"
         "    for line in maps:\n"
         "        f = line.split()\n"
         "        if 'r' not in f[1] or (len(f) > 5 and f[5].startswith('[v')):\n"
         "            continue\n"
         "        a, b = (int(x, 16) for x in f[0].split('-'))\n"
         "        try:\n"
         "            mem.seek(a)\n"
         "            data = mem.read(b - a)\n"
         "        except (OSError, ValueError, OverflowError):\n"
         "            continue\n"
         "        i = data.find(h1)\n"
         "        while i >= 0:\n"
         "            found += data[i + len(h1):i + len(h1) + len(h2)] == h2\n"
         "            i = data.find(h1, i + 1)\n"
         "found\n";
}

std::string to_hex(const std::string& text) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : text) out += {digits[c >> 4], digits[c & 15]};
  return out;
}

}  // namespace

CATCH_REGISTER_LISTENER(AllKernelsFromZygote)

// What a kernel is, as it sees itself: everything but what differs between sandboxes.
const char* kProfile =
    "import os, resource\n"
    "status = [l for l in open('/proc/self/status') if l.startswith(\n"
    "    ('Name', 'Uid', 'Gid', 'Groups', 'Cap', 'NoNewPrivs', 'Seccomp', 'SigBlk', 'SigIgn'))]\n"
    "limits = [l for l in open('/proc/self/limits') if l.startswith(('Max core', 'Max open files'))]\n"
    "open('/proc/self/mem', 'rb').close()\n"
    "fds = sorted(int(f) for f in os.listdir('/proc/self/fd'))\n"
    "cmdline = open('/proc/self/cmdline').read().rstrip('\\0').split('\\0')\n"
    "print(''.join(status + limits), cmdline, os.getsid(0) == os.getpid(), os.getcwd(), oct(os.umask(0o22)),\n"
    "      os.stat('/proc/self/environ').st_uid, fds, os.environ['GREETING'], os.environ['HOME'])\n";

TEST_CASE("a kernel from the zygote is what init's exec makes: ids, capabilities, filter, limits, fds, namespaces, cgroup") {
  NSBOX_NEEDS(kernel_zygote());
  ZygoteRoot root;
  auto zygote = root.create({"--env", "GREETING=hello"});
  auto execd = root.create({"--env", "GREETING=hello"}, {.extra_env = {"NSBOX_TEST_KERNEL_ZYGOTE="}});
  CHECK(root.cell(zygote, "import os; os.getppid()")["results"] == "0");  // forked by the zygote, outside
  CHECK(root.cell(execd, "import os; os.getppid()")["results"] == "1");   // exec'd by init
  auto mine = root.cell(zygote, kProfile);
  auto reference = root.cell(execd, kProfile);
  INFO(mine.dump());
  REQUIRE(mine["status"] == "ok");
  CHECK(mine["stdout"] == reference["stdout"]);
  std::string s = mine["stdout"];
  for (const char* line : {"Uid:\t1000\t1000\t1000\t1000\n", "CapEff:\t0000000000000000\n", "CapBnd:\t0000000000000000\n",
                           "NoNewPrivs:\t1\n", "Seccomp:\t2\n", "Seccomp_filters:\t1\n",
                           "['/opt/nsbox/nsbox-kernel', '--python-path', '/opt/nsbox/python', '--control-fd', '3'] True /home/user 0o22 1000"}) {
    INFO(line);
    CHECK(s.find(line) != std::string::npos);
  }
  // The namespaces, cgroup and limits of init's other children (a command's).
  const std::string view = "for n in user mnt net ipc uts cgroup pid; do readlink /proc/self/ns/$n; done; cat /proc/self/cgroup; "
                           "grep -E '^Max (core|open files)' /proc/self/limits";
  auto command = root.sh(zygote, view);
  REQUIRE(command.exit_code == 0);
  auto from_kernel = root.cell(zygote, "import subprocess\nprint(subprocess.run(['bash', '-c', \"\"\"" + view +
                                           "\"\"\"], capture_output=True, text=True).stdout, end='')");
  CHECK(from_kernel["stdout"] == command.out);
  // The host's files are out of reach by name: this test's source tree is not in the sandbox.
  CHECK(root.cell(zygote, std::string("import os; (os.path.exists('") + NSBOX_SOURCE_DIR + "'), os.path.isdir('/opt/nsbox/python'))")["results"] ==
        "(False, True)");
  // sys.path as the exec'd kernel's; variables persist.
  CHECK(root.cell(zygote, "import sys; v = 1; sys.path")["results"] == root.cell(execd, "import sys; sys.path")["results"]);
  CHECK(root.cell(zygote, "v + 1")["results"] == "2");
}

TEST_CASE("one sandbox's environment never reaches the memory of another's kernel from the same zygote") {
  NSBOX_NEEDS(kernel_zygote());
  ZygoteRoot root;
  std::string first = "Zy" + random_hex(12), second = random_hex(12) + "Gt";
  auto a = root.create({"--env", "ZYGOTE_SECRET=" + first + second});
  REQUIRE(root.cell(a, "import os; os.getppid()")["results"] == "0");
  auto b = root.create();
  REQUIRE(root.cell(b, "import os; os.getppid()")["results"] == "0");
  // The search finds the value where it is (a's environment), and not in b's kernel.
  auto in_a = root.cell(a, memory_search(to_hex(first), to_hex(second)));
  INFO(in_a.dump());
  REQUIRE(in_a["status"] == "ok");
  CHECK(std::stoi(in_a["results"].get<std::string>()) >= 1);
  auto in_b = root.cell(b, memory_search(to_hex(first), to_hex(second)));
  REQUIRE(in_b["status"] == "ok");
  CHECK(in_b["results"] == "0");
  // The zygote's random state is reseeded in each of its kernels.
  auto ra = root.cell(a, "import random; random.random()");
  auto rb = root.cell(b, "import random; random.random()");
  CHECK(ra["results"] != rb["results"]);
}

TEST_CASE("a zygote kernel is interrupted, killed and replaced like an exec'd one, and a filter violation is named") {
  NSBOX_NEEDS(kernel_zygote());
  ZygoteRoot root;
  auto id = root.create();
  root.cell(id, "kept = 'yes'");
  auto r = root.cell(id, "import time\nwhile True:\n    time.sleep(0.01)", {"--timeout", "1"});
  CHECK(r["status"] == "timeout");
  CHECK(r["error"]["ename"] == "KeyboardInterrupt");
  CHECK(root.cell(id, "kept")["results"] == "'yes'");
  auto stubborn = root.cell(id, "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    time.sleep(0.01)",
                            {"--timeout", "1"});
  CHECK(stubborn["status"] == "timeout");
  CHECK(stubborn["state_lost"] == true);
  CHECK(root.cell(id, "import os; os.getppid()")["results"] == "0");  // the fresh kernel came from the zygote too
  // Its filter's listener is the supervisor's as init's is: the kernel dies, the result says why.
  auto x32 = root.cell(id, "import ctypes\nctypes.CDLL(None).syscall(0x40000000 | 39)");
  CHECK(x32["status"] == "killed");
  CHECK(x32["reason"] == "seccomp");
  CHECK(x32["message"].get<std::string>().find("getpid (x32 ABI") != std::string::npos);
  CHECK(root.cell(id, "1 + 1")["results"] == "2");
}

// CPU seconds `pid` has used (utime + stime of /proc/<pid>/stat).
double cpu_seconds(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::istringstream fields(text.substr(text.rfind(')') + 2));  // after "pid (comm) "
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; fields >> field; ++i) {  // field 3 is the state
    if (i == 14) utime = std::stoull(field);
    if (i == 15) {
      stime = std::stoull(field);
      break;
    }
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// An ended kernel's seccomp listener hangs up once no process is left under its filter,
// and a hang-up stays reported: left in the supervisor's loop it woke the loop for ever,
// a supervisor busy on a whole core outside the sandbox's CPU limit (the third review's
// H1; any cell could set it off). Idle means well under a third of a second in a second;
// a busy loop takes all of it.
TEST_CASE("a supervisor stays idle after its zygote kernel ended: the ended filter's listener leaves its loop") {
  NSBOX_NEEDS(kernel_zygote());
  ZygoteRoot root;
  auto id = root.create();
  REQUIRE(root.cell(id, "import os; os.getppid()")["results"] == "0");
  root.cell(id, "import os; os._exit(0)");
  REQUIRE(root.cell(id, "import os; os.getppid()")["results"] == "0");  // the next kernel, from the zygote too
  pid_t supervisor = TestRoot::json(root.nsbox({"inspect", "--json", id}))["supervisor_pid"].get<pid_t>();
  REQUIRE(supervisor > 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the ended kernel reaped, its filter let go
  double before = cpu_seconds(supervisor);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  double used = cpu_seconds(supervisor) - before;
  INFO("the supervisor used " << used << " s of CPU in 1 s");
  CHECK(used < 0.3);
  CHECK(root.cell(id, "1 + 1")["results"] == "2");
}

// What a thread of an exec'd process has, a zygote kernel has too. Its stack is the
// process's main stack, not a buffer of the zygote's: deep recursion through C code (repr of a deeply nested list: about
// 2 MiB of C stack here) works and leaves the kernel whole (on a 256 KiB heap buffer it
// wrote over the kernel's heap, and the next cell printed nothing).
TEST_CASE("a zygote kernel has a whole main stack and its own rseq area, deep C recursion works, sched_getcpu is right") {
  NSBOX_NEEDS(kernel_zygote());
  ZygoteRoot root;
  auto id = root.create();
  REQUIRE(root.cell(id, "import os; os.getppid()")["results"] == "0");
  auto deep = root.cell(id, "import sys\nsys.setrecursionlimit(30000)\nx = []\nfor _ in range(20000): x = [x]\nlen(repr(x))");
  CHECK(deep["status"] == "ok");
  CHECK(deep["results"] == "40002");
  auto after = root.cell(id, "print('alive', sum(range(10)))\nsorted(str(i) for i in range(2000))[:2]");
  CHECK(after["status"] == "ok");
  CHECK(after["results"] == "['0', '1']");
  // Its restartable-sequences area is registered again (the intermediate, sharing the
  // zygote's memory, had none to pass on): sched_getcpu(), which glibc reads from it,
  // follows the CPU the kernel is moved to.
  auto cpus = root.cell(id, "import os, ctypes\ngetcpu = ctypes.CDLL(None).sched_getcpu\nall_cpus = os.sched_getaffinity(0)\n"
                            "seen = []\nfor c in sorted(all_cpus):\n    os.sched_setaffinity(0, {c})\n    seen.append(getcpu() == c)\n"
                            "os.sched_setaffinity(0, all_cpus)\n(all(seen), len(seen))");
  INFO(cpus.dump());
  CHECK(cpus["results"].get<std::string>().starts_with("(True, "));
}

// A dead zygote is started again by the server (kernel/zygote_keeper/kernel_zygote_process.h): at
// once the first time, then after a delay (here 120 s) while it keeps dying young, and in
// that delay a supervisor asking is told at once and its kernel starts through init.
TEST_CASE("a sandbox's end ends its zygote kernel, and a dead zygote is started again, kernels meanwhile through init") {
  NSBOX_NEEDS(kernel_zygote());
  ZygoteRoot root(nsbox::KernelZygoteOptions{{std::chrono::milliseconds(0), std::chrono::seconds(120)}});
  auto a = root.create();
  REQUIRE(root.cell(a, "import os; os.getppid()")["results"] == "0");
  auto b = root.create();
  REQUIRE(root.cell(b, "x = 41")["status"] == "ok");
  CHECK(root.zygote_children() == 2);
  REQUIRE(root.nsbox({"rm", a}).exit_code == 0);
  for (int i = 0; i < 100 && root.zygote_children() != 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(root.zygote_children() == 1);  // the pid namespace's end took it; the zygote reaped it
  pid_t first = root.zygote_pid();
  root.kill_zygote();
  CHECK(root.cell(b, "x + 1")["results"] == "42");  // its kernel lives on
  REQUIRE(root.await_zygote_other_than(first));
  REQUIRE(root.await_zygote_other_than(0));
  CHECK(root.zygote_starts() == 2);
  auto c = root.create();
  CHECK(root.cell(c, "import os; os.getppid()")["results"] == "0");  // from the zygote started again
  // Dead again within a minute of its start: the next start waits 120 s.
  pid_t second = root.zygote_pid();
  root.kill_zygote();
  REQUIRE(root.await_zygote_other_than(second));
  CHECK(root.zygote_pid() == 0);
  auto d = root.create();
  CHECK(root.cell(d, "import os; os.getppid()")["results"] == "1");  // exec'd by init, at once
  CHECK(root.cell(c, "1 + 1")["results"] == "2");
  // The fallback is visible: inspect says where each kernel came from, and why not the zygote.
  auto on_d = TestRoot::json(root.nsbox({"inspect", "--json", d}));
  CHECK(on_d["kernel_origin"] == "init");
  CHECK(!on_d.value("kernel_zygote_fallback", "").empty());
  auto on_c = TestRoot::json(root.nsbox({"inspect", "--json", c}));
  CHECK(on_c["kernel_origin"] == "zygote");
  CHECK(!on_c.contains("kernel_zygote_fallback"));
  CHECK(root.nsbox({"inspect", d}).out.find("kernel:      started by the sandbox's init (not the zygote's: ") != std::string::npos);
}

// A zygote serves only supervisors of its own build (the request's build stamp); and one
// whose binary was replaced (an install while the server ran) is ended by the server
// within 10 s (KernelZygoteOptions::check_every) and started again from the new binary.
TEST_CASE("a zygote refuses a supervisor of another build, and one whose binary was replaced is started again from the new") {
  NSBOX_NEEDS(kernel_zygote());
  TempDir dir("nsbox-zygote-install");
  struct statvfs fs{};
  if (::statvfs(dir.path().c_str(), &fs) == 0 && (fs.f_flag & ST_NOEXEC))
    NSBOX_SKIP_FOR("none", "the temporary directory's filesystem is noexec: no zygote binary can run from a copy there");
  auto layout = nsbox::InstallLayout::discover();
  REQUIRE(layout);
  // An install of its own, to replace the binary of: the zygote and the sandbox directory.
  std::string binary = dir.path() + "/nsbox-kernel-zygote";
  REQUIRE(std::filesystem::copy_file(layout->libexec_dir + "/nsbox-kernel-zygote", binary));
  std::filesystem::create_directory_symlink(layout->sandbox_dir(), dir.path() + "/sandbox");
  nsbox::InstallLayout own = *layout;
  own.libexec_dir = dir.path();
  auto started = nsbox::KernelZygoteProcess::start(own, dir.path());
  INFO((started ? "" : started.error().message));
  REQUIRE(started);
  auto& zygote = **started;
  pid_t first = zygote.pid();
  REQUIRE(first > 0);  // start() returns once the zygote serves, and names it

  // A request as a supervisor of another build sends it (well formed otherwise).
  auto ask = [&](const char* build) {
    nsbox::kernel_zygote::Request request;
    std::memcpy(request.build, build, sizeof request.build);
    nsbox::UniqueFd pidfd(nsbox::sys::pidfd_open(::getpid(), 0)), null_fd(::open("/dev/null", O_RDWR | O_CLOEXEC));
    std::vector<int> fds = {pidfd.get(), null_fd.get(), null_fd.get(), null_fd.get(), null_fd.get()};
    auto connection = nsbox::protocol::connect_unix(zygote.socket_path(), SOCK_SEQPACKET);  // the request follows at once
    REQUIRE(connection);
    REQUIRE(nsbox::sys::send_with_fds(connection->get(), &request, sizeof request, fds) == sizeof request);
    nsbox::kernel_zygote::Reply reply{};
    nsbox::UniqueFd none;
    pollfd p{connection->get(), POLLIN, 0};
    REQUIRE(::poll(&p, 1, 10000) == 1);
    REQUIRE(nsbox::sys::recv_with_fd(connection->get(), &reply, sizeof reply, none) == sizeof reply);
    return reply;
  };
  auto refused = ask("00000000000000000000000000000000");
  CHECK(refused.kind == nsbox::kernel_zygote::ReplyKind::kFailed);
  CHECK(std::string(refused.message).find("another build") != std::string::npos);
  CHECK(zygote.pid() == first);  // its binary is the one on disk: it serves on

  // An install: the binary renamed over.
  REQUIRE(std::filesystem::copy_file(layout->libexec_dir + "/nsbox-kernel-zygote", binary + ".new"));
  REQUIRE(::rename((binary + ".new").c_str(), binary.c_str()) == 0);
  bool restarted = false;
  for (int i = 0; i < 600 && !restarted; ++i) {
    pid_t now = zygote.pid();
    restarted = now != 0 && now != first;
    if (!restarted) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(restarted);
  CHECK(zygote.starts() == 2);
  std::string exe(4096, '\0');
  ssize_t n = ::readlink(("/proc/" + std::to_string(zygote.pid()) + "/exe").c_str(), exe.data(), exe.size());
  CHECK(exe.substr(0, n > 0 ? static_cast<size_t>(n) : 0) == binary);  // the new file, not "(deleted)"
  started->reset();
}

// The server pings its zygote every check_every: one that answers serves on; one alive
// but wedged (here stopped: it accepts nothing) is ended after wedged_after and started
// again, as one that ended would be.
TEST_CASE("a zygote that answers pings serves on, and one alive but wedged is ended and started again") {
  NSBOX_NEEDS(kernel_zygote());
  TempDir dir("nsbox-zygote-wedged");
  nsbox::KernelZygoteOptions options;
  options.check_every = std::chrono::milliseconds(100);
  options.wedged_after = std::chrono::seconds(3);
  auto started = start_zygote(dir.path(), options);
  INFO((started ? "" : started.error().message));
  REQUIRE(started);
  auto& zygote = **started;
  pid_t first = zygote.pid();
  REQUIRE(first > 0);

  // The zygote's answer, as the server gets it.
  auto connection = nsbox::protocol::connect_unix(zygote.socket_path(), SOCK_SEQPACKET);
  REQUIRE(connection);
  nsbox::kernel_zygote::Request ping;
  ping.magic = nsbox::kernel_zygote::kPingMagic;
  REQUIRE(::send(connection->get(), &ping, sizeof ping, MSG_NOSIGNAL) == sizeof ping);
  pollfd p{connection->get(), POLLIN, 0};
  REQUIRE(::poll(&p, 1, 10000) == 1);
  nsbox::kernel_zygote::Reply reply{};
  REQUIRE(::recv(connection->get(), &reply, sizeof reply, 0) == sizeof reply);
  CHECK(reply.kind == nsbox::kernel_zygote::ReplyKind::kPong);

  // Ten pings answered (a second at this check_every; 60 s at most on a loaded host), and
  // the zygote serving them is still the first: none was taken for wedged.
  for (int i = 0; i < 1200 && zygote.pings_answered() < 10; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(zygote.pings_answered() >= 10);
  CHECK(zygote.pid() == first);
  CHECK(zygote.starts() == 1);

  nsbox::UniqueFd first_fd(nsbox::sys::pidfd_open(first, 0));  // that process, whatever its pid names later
  REQUIRE(first_fd);
  REQUIRE(::kill(first, SIGSTOP) == 0);
  bool restarted = false;
  for (int i = 0; i < 1200 && !restarted; ++i) {  // 60 s at most
    pid_t now = zygote.pid();
    restarted = now != 0 && now != first;
    if (!restarted) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(restarted);
  CHECK(zygote.starts() == 2);
  errno = 0;
  CHECK(::syscall(SYS_pidfd_send_signal, first_fd.get(), 0, nullptr, 0) == -1);  // the wedged one was ended
  CHECK(errno == ESRCH);
  started->reset();
}

TEST_CASE("a kernel whose start would read the caller's variables (PYTHONPATH, LANG) is exec'd by init") {
  NSBOX_NEEDS(kernel_zygote());
  ZygoteRoot root;
  auto plain = root.create();
  CHECK(root.cell(plain, "import os; os.getppid()")["results"] == "0");
  auto own_path = root.create({"--env", "PYTHONPATH=/home/user/lib"});
  CHECK(root.cell(own_path, "import os, sys; (os.getppid(), '/home/user/lib' in sys.path)")["results"] == "(1, True)");
  auto own_lang = root.create({"--env", "LANG=C"});
  CHECK(root.cell(own_lang, "import os; os.getppid()")["results"] == "1");
  // inspect says so, and why.
  auto plain_info = TestRoot::json(root.nsbox({"inspect", "--json", plain}));
  CHECK(plain_info["kernel_origin"] == "zygote");
  auto lang_info = TestRoot::json(root.nsbox({"inspect", "--json", own_lang}));
  CHECK(lang_info["kernel_origin"] == "init");
  CHECK(lang_info["kernel_zygote_fallback"] == "its environment sets LANG, which a kernel reads at its start");
}
