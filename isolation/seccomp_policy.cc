#include "isolation/seccomp_policy.h"

#include <elf.h>
#include <link.h>
#include <linux/audit.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <string_view>

#include "isolation/sys/files.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox::seccomp {
namespace {

// Part of the cache key (policy_fingerprint), with the tables and the executable's build id.
constexpr std::string_view kPolicyVersion = "nsbox-seccomp-5";

// Docker's default allowlist, minus the calls that need a capability we never grant
// (chroot, the *_module family, ...), minus name_to_handle_at (half of "Shocker"),
// adjtimex/clock_adjtime (time setters), and mempolicy calls. Conditional calls (clone,
// ioctl, personality, socket) are handled in add_conditional_rules.
const std::vector<const char*> kAllowed = {
    "accept", "accept4", "access", "alarm", "arch_prctl", "bind", "brk", "cachestat", "capget",
    "capset", "chdir", "chmod", "chown", "clock_getres", "clock_gettime", "clock_nanosleep",
    "close", "close_range", "connect", "copy_file_range", "creat", "dup", "dup2", "dup3",
    "epoll_create", "epoll_create1", "epoll_ctl", "epoll_pwait", "epoll_pwait2", "epoll_wait",
    "eventfd", "eventfd2", "execve", "execveat", "exit", "exit_group", "faccessat",
    "faccessat2", "fadvise64", "fallocate", "fanotify_mark", "fchdir", "fchmod", "fchmodat",
    "fchmodat2", "fchown", "fchownat", "fcntl", "fdatasync", "fgetxattr", "flistxattr", "flock",
    "fork", "fremovexattr", "fsetxattr", "fstat", "fstatfs", "fsync", "ftruncate", "futex",
    "futex_requeue", "futex_wait", "futex_waitv", "futex_wake", "futimesat", "getcpu", "getcwd",
    "getdents", "getdents64", "getegid", "geteuid", "getgid", "getgroups", "getitimer",
    "getpeername", "getpgid", "getpgrp", "getpid", "getppid", "getpriority", "getrandom",
    "getresgid", "getresuid", "getrlimit", "get_robust_list", "getrusage", "getsid",
    "getsockname", "getsockopt", "gettid", "gettimeofday", "getuid", "getxattr",
    "inotify_add_watch", "inotify_init", "inotify_init1", "inotify_rm_watch", "io_cancel",
    "io_destroy", "io_getevents", "io_pgetevents", "ioprio_get", "ioprio_set", "io_setup",
    "io_submit", "kill", "landlock_add_rule", "landlock_create_ruleset",
    "landlock_restrict_self", "lchown", "lgetxattr", "link", "linkat", "listen", "listxattr",
    "llistxattr", "lremovexattr", "lseek", "lsetxattr", "lstat", "madvise", "map_shadow_stack",
    "membarrier", "memfd_create", "memfd_secret", "mincore", "mkdir", "mkdirat", "mknod",
    "mknodat", "mlock", "mlock2", "mlockall", "mmap", "mprotect", "mq_getsetattr", "mq_notify",
    "mq_open", "mq_timedreceive", "mq_timedsend", "mq_unlink", "mremap", "msgctl", "msgget",
    "msgrcv", "msgsnd", "msync", "munlock", "munlockall", "munmap", "nanosleep", "newfstatat",
    "open", "openat", "openat2", "pause", "pidfd_open", "pidfd_send_signal", "pipe", "pipe2",
    "pkey_alloc", "pkey_free", "pkey_mprotect", "poll", "ppoll", "prctl", "pread64", "preadv",
    "preadv2", "prlimit64", "process_mrelease", "pselect6", "pwrite64", "pwritev", "pwritev2",
    "read", "readahead", "readlink", "readlinkat", "readv", "recvfrom", "recvmmsg", "recvmsg",
    "remap_file_pages", "removexattr", "rename", "renameat", "renameat2", "restart_syscall",
    "rmdir", "rseq", "rt_sigaction", "rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo",
    "rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait", "rt_tgsigqueueinfo",
    "sched_getaffinity", "sched_getattr", "sched_getparam", "sched_get_priority_max",
    "sched_get_priority_min", "sched_getscheduler", "sched_rr_get_interval",
    "sched_setaffinity", "sched_setattr", "sched_setparam", "sched_setscheduler", "sched_yield",
    "seccomp", "select", "semctl", "semget", "semop", "semtimedop", "sendfile", "sendmmsg",
    "sendmsg", "sendto", "setfsgid", "setfsuid", "setgid", "setgroups", "setitimer", "setpgid",
    "setpriority", "setregid", "setresgid", "setresuid", "setreuid", "setrlimit",
    "set_robust_list", "setsid", "setsockopt", "set_tid_address", "setuid", "setxattr",
    "shmat", "shmctl", "shmdt", "shmget", "shutdown", "sigaltstack", "signalfd", "signalfd4",
    "socketpair", "splice", "stat", "statfs", "statx", "symlink", "symlinkat", "sync",
    "sync_file_range", "syncfs", "sysinfo", "tee", "tgkill", "time", "timer_create",
    "timer_delete", "timer_getoverrun", "timer_gettime", "timer_settime", "timerfd_create",
    "timerfd_gettime", "timerfd_settime", "times", "tkill", "truncate", "umask", "uname",
    "unlink", "unlinkat", "utime", "utimensat", "utimes", "vfork", "vmsplice", "wait4",
    "waitid", "write", "writev",
};

// Answered with ENOSYS rather than EPERM so callers fall back: clone3 (seccomp cannot
// inspect its flags struct; glibc retries with clone) and io_uring (it performs
// operations the filter never sees; moby PR #46762).
const std::vector<const char*> kNotImplemented = {"clone3", "io_uring_setup", "io_uring_enter",
                                                  "io_uring_register"};

// clone() with any of these is refused: new namespaces, and CLONE_PARENT, which makes the
// caller's parent the child's: for a kernel from the zygote that is the host-root zygote,
// which a sandbox could then keep reaping its children (the third review's L2). No program
// a sandbox runs needs it.
constexpr uint64_t kRefusedCloneFlags = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID |
                                        CLONE_NEWNET | CLONE_NEWCGROUP | CLONE_PARENT;

// The call runs unless the low 32 bits of argument `arg` equal `value` (then the default,
// EPERM, applies). The kernel truncates these int arguments to 32 bits, so a plain 64-bit
// "not equal" would let `value | 1<<32` through. libseccomp has no masked not-equal, so
// "differs" is spelled as 32 rules, one per bit that may differ.
int allow_unless_low32_equals(scmp_filter_ctx ctx, int nr, unsigned arg, uint32_t value) {
  for (int bit = 0; bit < 32; ++bit) {
    uint64_t mask = 1ull << bit;
    uint64_t differing = (value & mask) ^ mask;
    int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 1, scmp_arg_cmp{arg, SCMP_CMP_MASKED_EQ, mask, differing});
    if (rc < 0) return rc;
  }
  return 0;
}

// Conditional calls: allowed for the arguments below, EPERM (the default) otherwise.
int add_conditional_rules(scmp_filter_ctx ctx) {
  int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, kRefusedCloneFlags, 0));
  if (rc == 0) rc = allow_unless_low32_equals(ctx, SCMP_SYS(ioctl), 1, TIOCSTI);
  if (rc == 0) rc = allow_unless_low32_equals(ctx, SCMP_SYS(socket), 0, AF_VSOCK);
  // personality: the values Docker allows (plain Linux, UNAME26, query), and plain Linux
  // without address-space randomisation (ADDR_NO_RANDOMIZE, 0x40000: a process's own
  // layout; nsbox-kernel uses it for memory merging, docs/design.md).
  for (uint64_t persona : {0x0ull, 0x8ull, 0x20000ull, 0x20008ull, 0x40000ull, 0xffffffffull})
    if (rc == 0)
      rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(personality), 1,
                            SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffull, persona));
  return rc;
}

// Numbers libseccomp's table does not name (newer than it, or holes) answer ENOSYS, as
// the kernel would for a syscall it lacks, so that callers fall back. Beyond
// kSyscallRange nothing exists on any arch nsbox runs on; those get EPERM.
constexpr int kSyscallRange = 512;

int add_unknown_rules(scmp_filter_ctx ctx) {
  for (int nr = 0; nr < kSyscallRange; ++nr) {
    char* name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);
    if (name) {
      ::free(name);
      continue;
    }
    if (int rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), nr, 0); rc < 0) return rc;
  }
  return 0;
}

Error libseccomp_error(std::string_view what, int rc) { return sys_error(std::string("libseccomp: ") + std::string(what), -rc); }

}  // namespace

const std::vector<const char*>& allowed_syscalls() { return kAllowed; }

Result<Program> compile() {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
  if (!ctx) return fail(make_error(ErrorCode::kInternal, "libseccomp: seccomp_init failed"));
  struct Release {
    scmp_filter_ctx c;
    ~Release() { seccomp_release(c); }
  } release{ctx};

  // Another ABI goes to the supervisor's listener instead of straight to death, so the
  // user learns which syscall it was (a killed process's /proc/<pid>/syscall is empty).
  if (int rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_NOTIFY); rc < 0)
    return fail(libseccomp_error("set bad-arch action", rc));
  // A binary tree keeps the per-syscall cost low for the long rule list.
  (void)seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);

  for (const char* name : kAllowed) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) continue;  // newer than this libseccomp: its number answers ENOSYS
    if (int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0); rc < 0)
      return fail(libseccomp_error(std::string("allow ") + name, rc));
  }
  for (const char* name : kNotImplemented) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) continue;
    if (int rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), nr, 0); rc < 0)
      return fail(libseccomp_error(std::string("ENOSYS for ") + name, rc));
  }
  if (int rc = add_conditional_rules(ctx); rc < 0) return fail(libseccomp_error("conditional rules", rc));
  if (int rc = add_unknown_rules(ctx); rc < 0) return fail(libseccomp_error("ENOSYS rules", rc));

  UniqueFd mem(::memfd_create("nsbox-seccomp", MFD_CLOEXEC));
  if (!mem) return fail(sys_error("memfd_create for seccomp export"));
  if (int rc = seccomp_export_bpf(ctx, mem.get()); rc < 0) return fail(libseccomp_error("export BPF", rc));
  off_t size = ::lseek(mem.get(), 0, SEEK_END);
  if (size <= 0 || size % sizeof(sock_filter) != 0)
    return fail(make_error(ErrorCode::kInternal, "libseccomp exported a BPF program of odd size"));
  Program program;
  program.code.resize(static_cast<size_t>(size) / sizeof(sock_filter));
  if (::pread(mem.get(), program.code.data(), static_cast<size_t>(size), 0) != size)
    return fail(sys_error("read exported seccomp BPF"));
  return program;
}

std::string executable_build_id() {
  std::string id;
  // The first object dl_iterate_phdr reports is the executable itself.
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) -> int {
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_NOTE) continue;
          const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
          const char* end = p + ph.p_memsz;
          while (p + sizeof(ElfW(Nhdr)) <= end) {
            const auto* note = reinterpret_cast<const ElfW(Nhdr)*>(p);
            const char* name = p + sizeof(ElfW(Nhdr));
            const char* desc = name + ((note->n_namesz + 3) & ~3u);
            if (desc + note->n_descsz > end) break;
            if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
              static const char kHex[] = "0123456789abcdef";
              auto* s = static_cast<std::string*>(out);
              for (uint32_t k = 0; k < note->n_descsz; ++k) {
                auto b = static_cast<unsigned char>(desc[k]);
                *s += kHex[b >> 4];
                *s += kHex[b & 15];
              }
              return 1;
            }
            p = desc + ((note->n_descsz + 3) & ~3u);
          }
        }
        return 1;
      },
      &id);
  return id;
}

// FNV-1a over everything the program is built from: the allowlist tables and libseccomp's
// version, and the build of the code that turns them into rules (conditional rules on
// ioctl, socket, personality and clone are code, not tables: an edited rule must never
// find the old program in a cache that survived an upgrade).
std::string policy_fingerprint(std::string_view build_id) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](std::string_view s) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
  };
  mix(kPolicyVersion);
  mix(build_id);
  for (const char* n : kAllowed) mix(n);
  for (const char* n : kNotImplemented) mix(n);
  mix(std::to_string(kSyscallRange) + "/" + std::to_string(kRefusedCloneFlags));
  const scmp_version* v = seccomp_version();
  mix(std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->micro));
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

namespace {

// The cached program is installed as the sandbox's filter: use it only if it is a regular
// file of ours that nobody else may write (the cache directory is checked the same way
// by the state store). Anything else is ignored and the policy compiled afresh.
std::optional<std::string> read_trusted_cache(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st{};
  if (!fd || ::fstat(fd.get(), &st) != 0) return std::nullopt;
  if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 022) || st.st_size > (1 << 20)) return std::nullopt;
  std::string data(static_cast<size_t>(st.st_size), '\0');
  if (::pread(fd.get(), data.data(), data.size(), 0) != st.st_size) return std::nullopt;
  return data;
}

}  // namespace

Result<Program> compile_cached(const std::string& cache_dir) {
  static const std::string build = executable_build_id();
  std::string key = "seccomp-" + policy_fingerprint(build);
  std::string path = cache_dir + "/" + key + ".bpf";
  if (auto cached = read_trusted_cache(path); cached && !cached->empty() && cached->size() % sizeof(sock_filter) == 0) {
    Program p;
    p.code.resize(cached->size() / sizeof(sock_filter));
    std::memcpy(p.code.data(), cached->data(), cached->size());
    return p;
  }
  Program p = NSBOX_TRY(compile());
  // A cache that cannot be written only costs the next start a millisecond.
  (void)files::atomic_write(path, std::string_view(reinterpret_cast<const char*>(p.code.data()),
                                                   p.code.size() * sizeof(sock_filter)), 0600);
  return p;
}

Result<int> install(const Program& program) {
  sock_fprog prog{static_cast<unsigned short>(program.code.size()),
                  const_cast<sock_filter*>(program.code.data())};
  long fd = ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
  if (fd < 0) return fail(sys_error("seccomp(SECCOMP_SET_MODE_FILTER)"));
  return static_cast<int>(fd);
}

std::string describe_syscall(uint32_t audit_arch, int nr) {
  uint32_t arch = audit_arch == AUDIT_ARCH_I386     ? SCMP_ARCH_X86
                  : audit_arch == AUDIT_ARCH_X86_64 ? SCMP_ARCH_X86_64
                                                    : audit_arch;
  std::string abi = audit_arch == AUDIT_ARCH_I386 ? "i386" : "x86_64";
  int plain = nr;
  if (audit_arch == AUDIT_ARCH_X86_64 && (nr & 0x40000000)) {
    abi = "x32";
    arch = SCMP_ARCH_X32;
  }
  char* name = seccomp_syscall_resolve_num_arch(arch, plain);
  std::string out = name ? std::string(name) : "syscall " + std::to_string(nr);
  ::free(name);
  return out + " (" + abi + " ABI, number " + std::to_string(nr) + ")";
}

}  // namespace nsbox::seccomp
