#include <linux/audit.h>
#include <sys/stat.h>
#include <unistd.h>

#include <seccomp.h>

#include <algorithm>
#include <cstring>

#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "isolation/seccomp_policy.h"
#include "isolation/sys/files.h"
#include "tests/support/host_features.h"
#include "tests/support/nsbox_cli.h"
#include "tests/support/process.h"

using namespace nsbox;

TEST_CASE("the seccomp policy compiles, and the cached program is the compiled one") {
  auto program = seccomp::compile();
  REQUIRE(program);
  CHECK(program->code.size() > 50);
  char tmpl[] = "/tmp/nsbox-test-XXXXXX";
  std::string dir = ::mkdtemp(tmpl);
  auto first = seccomp::compile_cached(dir);
  auto second = seccomp::compile_cached(dir);  // read back from disk
  REQUIRE(first);
  REQUIRE(second);
  CHECK(second->code.size() == program->code.size());
  CHECK(std::memcmp(second->code.data(), program->code.data(), program->code.size() * sizeof(sock_filter)) == 0);
  std::filesystem::remove_all(dir);
}

namespace {

// Every call of nsbox-probe's `syscalls` action (tests/probe/nsbox_probe.c), by the name
// it reports, the syscall it makes (as libseccomp names it) and the filter's answer:
// "EPERM" or "ENOSYS", or "allowed" for a call the filter lets through. The integration
// test runs the same action in a sandbox; listing every name here means one renamed or
// dropped in the probe, or moved onto the allowlist, fails a test.
struct ProbedCall {
  std::string probe_name;
  std::string syscall;
  std::string filtered;
};

const std::vector<ProbedCall> kProbed = {
    {"mount", "mount", "EPERM"},
    {"umount2", "umount2", "EPERM"},
    {"pivot_root", "pivot_root", "EPERM"},
    {"chroot", "chroot", "EPERM"},
    {"unshare_user", "unshare", "EPERM"},
    {"unshare_user_mount", "unshare", "EPERM"},
    {"setns", "setns", "EPERM"},
    {"clone_newuser", "clone", "EPERM"},  // clone itself is allowed without namespace flags
    {"clone_newuser_newns", "clone", "EPERM"},
    {"clone_parent", "clone", "EPERM"},  // a zygote kernel's parent is the host-root zygote
    {"clone3", "clone3", "ENOSYS"},
    {"ptrace", "ptrace", "EPERM"},
    {"process_vm_readv", "process_vm_readv", "EPERM"},
    {"kcmp", "kcmp", "EPERM"},
    {"pidfd_getfd", "pidfd_getfd", "EPERM"},
    {"keyctl", "keyctl", "EPERM"},
    {"add_key", "add_key", "EPERM"},
    {"request_key", "request_key", "EPERM"},
    {"bpf", "bpf", "EPERM"},
    {"perf_event_open", "perf_event_open", "EPERM"},
    {"userfaultfd", "userfaultfd", "EPERM"},
    {"io_uring_setup", "io_uring_setup", "ENOSYS"},
    {"open_by_handle_at", "open_by_handle_at", "EPERM"},
    {"name_to_handle_at", "name_to_handle_at", "EPERM"},
    {"init_module", "init_module", "EPERM"},
    {"finit_module", "finit_module", "EPERM"},
    {"delete_module", "delete_module", "EPERM"},
    {"kexec_load", "kexec_load", "EPERM"},
    {"reboot", "reboot", "EPERM"},
    {"swapon", "swapon", "EPERM"},
    {"acct", "acct", "EPERM"},
    {"syslog", "syslog", "EPERM"},
    {"settimeofday", "settimeofday", "EPERM"},
    {"clock_settime", "clock_settime", "EPERM"},
    {"adjtimex", "adjtimex", "EPERM"},
    {"sethostname", "sethostname", "EPERM"},
    {"fsopen", "fsopen", "EPERM"},
    {"open_tree", "open_tree", "EPERM"},
    {"move_mount", "move_mount", "EPERM"},
    {"mount_setattr", "mount_setattr", "EPERM"},
    {"personality_rie", "personality", "EPERM"},  // personality(0) and the other plain ones are allowed
    {"socket_vsock", "socket", "EPERM"},          // every other family is allowed
    {"socket_vsock_highbits", "socket", "EPERM"},
    {"ioctl_tiocsti", "ioctl", "EPERM"},  // every other request is allowed
    {"ioctl_tiocsti_highbits", "ioctl", "EPERM"},
    // Allowed: the sandbox gets EPERM from the kernel (no CAP_MKNOD), not from the filter.
    {"mknod_char", "mknod", "allowed"},
    // A number no kernel has assigned: ENOSYS with or without the filter, whose default
    // (EPERM) would make glibc and CPython give up instead of falling back.
    {"unknown_500", "", "ENOSYS"},
    {"getpid", "getpid", "allowed"},
};

bool on_allowlist(const std::string& name) {
  const auto& allowed = seccomp::allowed_syscalls();
  return std::any_of(allowed.begin(), allowed.end(), [&](const char* a) { return name == a; });
}

// "NAME RESULT" lines of the probe's `syscalls` action.
std::map<std::string, std::string> probe_results(const std::vector<std::string>& argv) {
  auto r = nsbox::test::run_process(argv, {.timeout_s = 60});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  std::map<std::string, std::string> results;
  std::istringstream lines(r.out);
  for (std::string name, result; lines >> name >> result;) results[name] = result;
  return results;
}

}  // namespace

TEST_CASE("every syscall the sandbox test probes is refused by the filter, where without it root is refused nothing") {
  auto program = seccomp::compile();
  REQUIRE(program);
  char tmpl[] = "/tmp/nsbox-test-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  std::string dir = tmpl;
  std::string bpf = dir + "/filter.bpf";
  auto written = nsbox::files::atomic_write(
      bpf, std::string_view(reinterpret_cast<const char*>(program->code.data()), program->code.size() * sizeof(sock_filter)), 0600);
  std::map<std::string, std::string> unfiltered, filtered;
  if (written) {
    unfiltered = probe_results({nsbox::test::probe_binary(), "syscalls"});
    filtered = probe_results({nsbox::test::probe_binary(), "syscalls", bpf});
  }
  std::filesystem::remove_all(dir);
  REQUIRE(written);

  // The probe reports exactly the calls listed here, no more and no fewer.
  std::set<std::string> listed, reported;
  for (const auto& c : kProbed) listed.insert(c.probe_name);
  for (const auto& [name, result] : filtered) reported.insert(name);
  CHECK(reported == listed);

  // Root has every capability: a call the kernel refuses to an ordinary process for want
  // of one goes through here, so EPERM (or ENOSYS) under the filter is the filter's alone.
  std::vector<std::string> refused_anyway;
  for (const auto& c : kProbed) {
    INFO(c.probe_name << ": unfiltered " << unfiltered[c.probe_name] << ", filtered " << filtered[c.probe_name]);
    if (c.filtered == "allowed") {
      CHECK(filtered[c.probe_name] == unfiltered[c.probe_name]);
      continue;
    }
    CHECK(filtered[c.probe_name] == c.filtered);
    if (c.probe_name == "unknown_500") {
      CHECK(unfiltered[c.probe_name] == "ENOSYS");
      continue;
    }
    CHECK_FALSE(unfiltered[c.probe_name].empty());
    if (unfiltered[c.probe_name] == c.filtered) refused_anyway.push_back(c.probe_name);
  }
  if (::geteuid() != 0) {
    nsbox::test::announce_partial("not root: " + std::to_string(refused_anyway.size()) +
                                  " calls the kernel refuses to an unprivileged caller could not be told from the filter's refusals");
  } else if (!refused_anyway.empty()) {
    // Only a host policy refuses root these (kexec_load_disabled, modules_disabled, lockdown).
    std::string names;
    for (const auto& n : refused_anyway) {
      INFO(n << " is refused to root without the filter");
      CHECK((n == "kexec_load" || n == "init_module" || n == "finit_module" || n == "delete_module"));
      names += (names.empty() ? "" : ", ") + n;
    }
    nsbox::test::announce_partial("refused to root by this host's policy even without the filter: " + names);
  }
}

TEST_CASE("the probed syscalls are names libseccomp knows, and none of the refused ones is on the allowlist") {
  for (const auto& c : kProbed) {
    if (c.syscall.empty()) continue;
    INFO(c.probe_name << " (" << c.syscall << ")");
    // A misspelt name would be "not on the allowlist" without meaning anything.
    CHECK(seccomp_syscall_resolve_name(c.syscall.c_str()) != __NR_SCMP_ERROR);
    if (c.filtered == "allowed") CHECK(on_allowlist(c.syscall));
    else CHECK_FALSE(on_allowlist(c.syscall));
  }
  // And the rest of the calls that must never be allowed outright.
  for (const char* name : {"umount", "chroot", "setns", "fsconfig", "fsmount", "fspick", "kexec_file_load", "lookup_dcookie",
                           "quotactl", "swapoff", "vhangup", "iopl", "ioperm", "clock_adjtime", "io_uring_enter",
                           "io_uring_register", "process_vm_writev", "mbind", "set_mempolicy", "move_pages"}) {
    INFO(name);
    CHECK(seccomp_syscall_resolve_name(name) != __NR_SCMP_ERROR);
    CHECK_FALSE(on_allowlist(name));
  }
}

TEST_CASE("a killed syscall is named with its ABI") {
  CHECK(seccomp::describe_syscall(AUDIT_ARCH_I386, 20) == "getpid (i386 ABI, number 20)");
  CHECK(seccomp::describe_syscall(AUDIT_ARCH_X86_64, 0x40000000 | 39) == "getpid (x32 ABI, number 1073741863)");
}

TEST_CASE("a cached program that others could have written is not trusted") {
  char tmpl[] = "/tmp/nsbox-test-XXXXXX";
  std::string dir = ::mkdtemp(tmpl);
  auto good = seccomp::compile_cached(dir);
  REQUIRE(good);
  // Replace the cache with "allow everything", writable by all: it must be ignored.
  std::string cached;
  for (const auto& e : std::filesystem::directory_iterator(dir)) cached = e.path();
  REQUIRE_FALSE(cached.empty());
  sock_filter allow_all{0x06, 0, 0, 0x7fff0000};
  REQUIRE(nsbox::files::write_file(cached, std::string_view(reinterpret_cast<char*>(&allow_all), sizeof allow_all)));
  REQUIRE(::truncate(cached.c_str(), sizeof allow_all) == 0);
  REQUIRE(::chmod(cached.c_str(), 0666) == 0);
  auto again = seccomp::compile_cached(dir);
  REQUIRE(again);
  CHECK(again->code.size() == good->code.size());
  std::filesystem::remove_all(dir);
}
