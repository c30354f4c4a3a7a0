// What code inside a sandbox can and cannot do: identity, capabilities, seccomp,
// filesystem view, processes. Every check runs in a real sandbox.
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "isolation/sys/files.h"
#include "tests/support/host_features.h"
#include "tests/support/nsbox_cli.h"
#include "tests/support/temp_dir.h"

using namespace nsbox::test;

namespace {

std::map<std::string, std::string> parse_pairs(const std::string& out) {
  std::map<std::string, std::string> m;
  std::istringstream lines(out);
  std::string key, value;
  while (lines >> key >> value) m[key] = value;
  return m;
}

std::string status_field(const std::string& status, const std::string& field) {
  std::istringstream lines(status);
  std::string line;
  while (std::getline(lines, line))
    if (line.rfind(field + ":", 0) == 0) {
      auto v = line.substr(field.size() + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  return "<missing>";
}

}  // namespace

TEST_CASE("code in a sandbox runs as uid 1000 with no capabilities, no_new_privs and a seccomp filter") {
  TestRoot root;
  auto id = root.create();
  auto r = root.sh(id, "cat /proc/self/status");
  REQUIRE(r.exit_code == 0);
  CHECK(status_field(r.out, "Uid") == "1000\t1000\t1000\t1000");
  CHECK(status_field(r.out, "Gid") == "1000\t1000\t1000\t1000");
  for (const char* caps : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}) CHECK(status_field(r.out, caps) == "0000000000000000");
  CHECK(status_field(r.out, "NoNewPrivs") == "1");
  CHECK(status_field(r.out, "Seccomp") == "2");
  auto who = root.sh(id, "id -un; echo $HOME; pwd; hostname");
  CHECK(who.out == "user\n/home/user\n/home/user\nnsbox\n");
}

namespace {

// What nsbox-probe's `syscalls` action reports for each call, and the lists below, are
// also in tests/unit/seccomp_policy_test.cc, which runs the action as root under the
// compiled filter: there nothing but the filter refuses a call.

// Calls that an ordinary process without the filter may make (a user namespace, with any
// other namespace in it), or that fail for it with another error (the probe's arguments
// are a bad pointer or an unknown flag): EPERM here comes from the filter alone.
const std::vector<std::string> kRefusedOnlyByTheFilter = {
    "mount", "umount2", "chroot", "unshare_user", "unshare_user_mount", "setns", "clone_newuser", "clone_newuser_newns",
    "clone_parent",
    "ptrace", "process_vm_readv", "kcmp", "pidfd_getfd", "keyctl", "add_key", "request_key", "perf_event_open",
    "userfaultfd", "name_to_handle_at", "swapon", "settimeofday", "clock_settime", "adjtimex", "open_tree",
    "mount_setattr", "personality_rie", "socket_vsock", "socket_vsock_highbits", "ioctl_tiocsti", "ioctl_tiocsti_highbits"};
// The ones that need a user namespace: where ordinary users may not make one, the kernel
// refuses them as well.
const std::set<std::string> kNeedUserNamespaces = {"unshare_user", "unshare_user_mount", "clone_newuser", "clone_newuser_newns"};
// Calls whose capability the kernel checks first (or that a sysctl refuses to ordinary
// users): EPERM inside with or without the filter, which shows that the sandbox has no
// capability. That the filter refuses them too is the unit test's to show.
const std::vector<std::string> kRefusedAnyway = {"pivot_root", "reboot", "acct", "syslog", "sethostname", "fsopen",
                                                 "move_mount", "init_module", "finit_module", "delete_module", "kexec_load",
                                                 "bpf", "open_by_handle_at", "mknod_char"};
// ENOSYS from the filter, so that glibc and liburing fall back; without it, EFAULT.
const std::vector<std::string> kNotImplemented = {"clone3", "io_uring_setup"};

}  // namespace

TEST_CASE("escape syscalls fail with EPERM, clone3, io_uring and unknown numbers with ENOSYS") {
  TestRoot root;
  auto id = root.create();
  root.install_probe(id);
  auto r = root.sh(id, "/mnt/files/probe syscalls");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  auto got = parse_pairs(r.out);
  for (const auto& list : {kRefusedOnlyByTheFilter, kRefusedAnyway}) {
    for (const auto& call : list) {
      INFO(call);
      CHECK(got[call] == "EPERM");
    }
  }
  for (const auto& call : kNotImplemented) {
    INFO(call);
    CHECK(got[call] == "ENOSYS");
  }
  CHECK(got["unknown_500"] == "ENOSYS");  // as the kernel says for a number it lacks
  CHECK(got["getpid"] == "OK");
}

TEST_CASE("without the filter, an ordinary user is not refused what the sandbox test expects only the filter to refuse") {
  // The same probe outside any sandbox, as an unprivileged user: had a sandbox no filter,
  // the test above would see these answers and fail.
  passwd* nobody = ::getpwnam("nobody");
  REQUIRE(nobody);
  TempDir dir;  // readable by nobody
  std::string probe = dir.path() + "/probe";
  std::error_code ec;
  std::filesystem::copy_file(probe_binary(), probe, ec);
  std::filesystem::permissions(probe, std::filesystem::perms(0755), ec);
  auto r = run_process({probe, "syscalls"}, {.timeout_s = 60, .as = RunAs{nobody->pw_uid, nobody->pw_gid}});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  auto got = parse_pairs(r.out);
  bool user_namespaces = got["unshare_user"] == "OK";
  for (const auto& call : kRefusedOnlyByTheFilter) {
    if (!user_namespaces && kNeedUserNamespaces.count(call)) continue;
    INFO(call << ": " << got[call]);
    CHECK_FALSE(got[call].empty());
    CHECK(got[call] != "EPERM");
  }
  if (!user_namespaces)
    announce_partial("an ordinary user cannot create a user namespace here (unshare: " + got["unshare_user"] +
                     "): the namespace calls were not checked");
  CHECK(got["clone_newuser"] == got["unshare_user"]);
  for (const auto& call : kNotImplemented) {
    INFO(call << ": " << got[call]);
    CHECK(got[call] == "EFAULT");
  }
}

TEST_CASE("threads and processes still start under the filter (glibc falls back from clone3)") {
  TestRoot root;
  auto id = root.create();
  auto r = root.sh(id, "python3 -c 'import threading, subprocess; t = threading.Thread(target=print, args=(\"thread\",)); "
                       "t.start(); t.join(); print(subprocess.run([\"echo\", \"child\"], capture_output=True, text=True).stdout, end=\"\")'");
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out == "thread\nchild\n");
}

TEST_CASE("a syscall from another ABI kills the process and the user is told which syscall") {
  TestRoot root;
  auto id = root.create();
  root.install_probe(id);
  auto x32 = root.nsbox({"sh", "--json", id, "--", "/mnt/files/probe", "x32"});
  auto j = TestRoot::json(x32);
  CHECK(x32.exit_code == 137);
  CHECK(j["status"] == "killed");
  CHECK(j["reason"] == "seccomp");
  CHECK(j["message"].get<std::string>().find("getpid (x32 ABI") != std::string::npos);
  CHECK(j["stdout"] == "");  // it never got to print

  auto int80 = root.nsbox({"sh", id, "--", "/mnt/files/probe", "int80"});
  INFO(int80.out << int80.err);
  CHECK(int80.out.find("int80 returned") == std::string::npos);  // blocked, whatever the host
  if (i386_syscalls().present) {
    CHECK(int80.exit_code == 137);
    CHECK(int80.err.find("killed by the seccomp filter: getpid (i386 ABI, number 20)") != std::string::npos);
  } else {
    // The CPU faults before the filter could see the call: the process dies all the same.
    announce_partial("the i386 ABI: " + i386_syscalls().absent_because +
                     "; checked only that the call never returns inside and the sandbox survives");
    CHECK((int80.exit_code == 137 || int80.exit_code == 139));
  }
  CHECK(root.sh(id, "echo still here").out == "still here\n");
}

TEST_CASE("the host's system directories are read-only and its secrets are hidden") {
  TestRoot root;
  auto id = root.create();
  auto r = root.sh(id,
                   "touch /usr/nsbox-x 2>&1; echo \"usr=$?\"; "
                   "(echo 1 > /proc/sys/kernel/core_pattern) 2>&1; echo \"proc_sys=$?\"; "
                   "(echo b > /proc/sysrq-trigger) 2>&1; echo \"sysrq=$?\"; "
                   "touch /etc/nsbox-x 2>&1; echo \"etc=$?\"; "
                   "touch /nsbox-x 2>&1; echo \"root_dir=$?\"; "
                   "echo \"shadow=$(wc -c < /etc/shadow)\"; "
                   "ls -d /root 2>&1; echo \"dotroot=$?\"; "
                   "echo \"timer_list=$(wc -c < /proc/timer_list)\"; echo \"keys=$(wc -c < /proc/keys)\"");
  INFO(r.out << r.err);
  CHECK(r.out.find("touch: cannot touch '/usr/nsbox-x': Read-only file system\nusr=1") != std::string::npos);
  CHECK(r.out.find("Read-only file system\nproc_sys=1") != std::string::npos);
  CHECK(r.out.find("etc=1") != std::string::npos);
  CHECK(r.out.find("root_dir=1") != std::string::npos);
  CHECK(r.out.find("shadow=0") != std::string::npos);
  CHECK(r.out.find("dotroot=2") != std::string::npos);
  CHECK(r.out.find("timer_list=0") != std::string::npos);  // masked with /dev/null (runc's list)
  CHECK(r.out.find("keys=0") != std::string::npos);
  CHECK(nsbox::files::read_file("/etc/shadow")->size() > 0);  // and it is not empty on the host
}

TEST_CASE("host processes are invisible, the sandbox's pid 1 is its init") {
  TestRoot root;
  auto id = root.create();
  auto r = root.sh(id, "cat /proc/1/comm; for p in /proc/[0-9]*; do cat $p/comm; done 2>/dev/null | sort -u | tr '\\n' ' '; echo; "
                       "test -e /proc/" + std::to_string(::getpid()) + "; echo $?");
  INFO(r.out << r.err);
  std::istringstream lines(r.out);
  std::string comm, names, visible;
  std::getline(lines, comm);
  std::getline(lines, names);
  std::getline(lines, visible);
  CHECK(comm == "nsbox-init");
  // Only the sandbox's own: init, its Python kernel, and this shell line.
  std::istringstream each(names);
  for (std::string name; each >> name;)
    CHECK((name == "nsbox-init" || name == "nsbox-kernel" || name == "bash" || name == "cat" || name == "sort" || name == "tr"));
  if (::getpid() > 10) CHECK(visible == "1");
}

TEST_CASE("only stdin, stdout and stderr reach a command, / has no way up") {
  TestRoot root;
  auto id = root.create();
  root.install_probe(id);
  auto fds = root.sh(id, "exec /mnt/files/probe fds");
  CHECK(fds.out == "fd 0\nfd 1\nfd 2\nfd 3\n");  // 3 is the probe's own directory handle
  CHECK(root.sh(id, "/mnt/files/probe root").out == "root is closed\n");
}

TEST_CASE("nothing mounted for a sandbox appears in the host's mount table") {
  TestRoot root;
  auto id = root.create();
  CHECK(root.sh(id, "mount -t tmpfs none /tmp 2>&1; ls /mnt/files").exit_code == 0);
  auto during = nsbox::files::read_file("/proc/self/mountinfo", 16 << 20);
  REQUIRE(during);
  // Only this test's own traces count: other programs may mount things meanwhile.
  CHECK(during->find(root.path()) == std::string::npos);
  CHECK(during->find(" /mnt/files ") == std::string::npos);
  CHECK(during->find("/opt/nsbox") == std::string::npos);
}

TEST_CASE("no fd of the caller reaches a sandbox, not even fd 3") {
  TestRoot root;
  // The caller holds the host's / open as fd 3 (a shell's `exec 3</`, socket activation).
  std::string line = "exec 3</; " + nsbox_binary() + " --root " + root.path() + " run -- /bin/sh -c 'ls /proc/self/fd; ls /proc/self/fd/3/ 2>&1'";
  auto one_shot = run_process({"/bin/sh", "-c", line});
  CHECK(one_shot.out.find("No such file or directory") != std::string::npos);
  auto id = root.create();
  std::string sh_line = "exec 3</; " + nsbox_binary() + " --root " + root.path() + " sh " + id + " -- 'ls /proc/self/fd/3/ 2>&1'";
  CHECK(run_process({"/bin/sh", "-c", sh_line}).out.find("No such file or directory") != std::string::npos);
}

TEST_CASE("a file given as stdin cannot be rewritten or chmod'ed from inside") {
  TestRoot root;
  auto id = root.create();
  // Owned by the sandbox's host uid, as a rootless user's own files are.
  std::string victim = root.path() + "/victim";
  REQUIRE(nsbox::files::atomic_write(victim, "original\n", 0644));
  REQUIRE(::chown(victim.c_str(), 1800000000, 1800000000) == 0);
  std::string attack = "cat; echo overwritten > /proc/self/fd/0; chmod 4777 /proc/self/fd/0";
  auto sh = run_process({"/bin/sh", "-c", nsbox_binary() + " --root " + root.path() + " sh " + id + " -- '" + attack + "' < " + victim});
  CHECK(sh.out == "original\n");  // it could read it...
  auto one_shot = run_process({"/bin/sh", "-c", nsbox_binary() + " --root " + root.path() + " run -- /bin/sh -c '" + attack + "' < " + victim});
  CHECK(one_shot.out == "original\n");
  CHECK(*nsbox::files::read_file(victim) == "original\n");  // ...but not change it
  struct stat st{};
  REQUIRE(::stat(victim.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0644);
  // And its stdout is a pipe, never the caller's file or terminal.
  auto fd1 = run_process({"/bin/sh", "-c", nsbox_binary() + " --root " + root.path() + " run -- readlink /proc/self/fd/1 > " + root.path() + "/out; cat " + root.path() + "/out"});
  CHECK(fd1.out.rfind("pipe:", 0) == 0);
}

TEST_CASE("files the sandbox writes belong to the sandbox user, and so do the host's uploads") {
  TestRoot root;
  auto id = root.create();
  REQUIRE(root.sh(id, "echo data > /mnt/files/made-inside").exit_code == 0);
  std::string local = root.path() + "/from-host";
  REQUIRE(nsbox::files::atomic_write(local, "host data\n", 0600));
  REQUIRE(root.nsbox({"files", id, "upload", local, "uploaded"}).exit_code == 0);
  CHECK(root.sh(id, "stat -c '%U %a' /mnt/files/made-inside /mnt/files/uploaded; echo more >> /mnt/files/uploaded && echo writable").out ==
        "user 644\nuser 644\nwritable\n");
}
