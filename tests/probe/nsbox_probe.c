// nsbox-probe: a static test binary run inside sandboxes (crun's idea: one helper with
// named actions). Syscalls are made with invalid pointers where possible (bubblewrap's
// try-syscall trick): a call that passes the seccomp filter then fails harmlessly with
// EFAULT/EBADF/EINVAL, so only the policy's errno means "blocked".
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <dirent.h>
#include <unistd.h>

#define BAD ((void*)1)

static const char* name_of(int err) {
  const char* n = strerrorname_np(err);
  return n ? n : "E?";
}

static void report(const char* what, long rc) {
  if (rc == -1) printf("%s %s\n", what, name_of(errno));
  else printf("%s OK\n", what);
}

// A raw clone with namespace `flags`; the child exits at once. Without a filter an
// ordinary process may create a user namespace, and with it any other namespace.
static long raw_clone(unsigned long flags) {
  long pid = syscall(SYS_clone, flags | SIGCHLD, 0, 0, 0, 0);
  if (pid == 0) _exit(0);
  if (pid > 0) waitpid((pid_t)pid, NULL, 0);
  return pid > 0 ? 0 : -1;
}

// unshare() in a child, so that a call the filter lets through changes only that child.
static long unshare_in_child(unsigned long flags) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) _exit(syscall(SYS_unshare, flags) == 0 ? 0 : errno);
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) { errno = ECHILD; return -1; }
  if (WEXITSTATUS(status) == 0) return 0;
  errno = WEXITSTATUS(status);
  return -1;
}

static void report_mknod(void) {
  long rc = mknod("/tmp/probe-null", S_IFCHR | 0600, makedev(1, 3));
  if (rc == 0) unlink("/tmp/probe-null");  // a caller that may (root, unfiltered) leaves nothing
  report("mknod_char", rc);
}

// The arguments are chosen so that, without the filter, a call fails harmlessly *before*
// any capability check (a bad pointer, an unknown flag) or succeeds harmlessly: then only
// the filter answers EPERM, and the sandbox test could not pass without it. For some calls
// the kernel checks the capability first (pivot_root, reboot, acct, sethostname, the module
// and kexec calls, fsopen, move_mount, open_by_handle_at): inside a sandbox they fail with
// EPERM either way, and tests/unit/seccomp_policy_test.cc runs this action as root under
// the compiled filter, where nothing but the filter refuses them. Every call is harmless
// for root too: no pointer is valid, no flag set is.
static int syscalls(void) {
  report("mount", syscall(SYS_mount, BAD, BAD, BAD, 0, BAD));
  report("umount2", syscall(SYS_umount2, BAD, 0));
  report("pivot_root", syscall(SYS_pivot_root, BAD, BAD));
  report("chroot", syscall(SYS_chroot, BAD));
  report("unshare_user", unshare_in_child(CLONE_NEWUSER));
  report("unshare_user_mount", unshare_in_child(CLONE_NEWUSER | CLONE_NEWNS));
  report("setns", syscall(SYS_setns, -1, 0));
  report("clone_newuser", raw_clone(CLONE_NEWUSER));
  report("clone_newuser_newns", raw_clone(CLONE_NEWUSER | CLONE_NEWNS));
  report("clone_parent", raw_clone(CLONE_PARENT));  // where allowed, a sibling of ours: our parent's to reap
  report("clone3", syscall(SYS_clone3, BAD, 88));
  report("ptrace", syscall(SYS_ptrace, 7 /* PTRACE_CONT */, getpid(), 0, 0));  // ESRCH: not our tracee
  report("process_vm_readv", syscall(SYS_process_vm_readv, getpid(), BAD, 1, BAD, 1, 0));
  report("kcmp", syscall(SYS_kcmp, getpid(), getpid(), 0 /* KCMP_FILE */, 0, 0));
  report("pidfd_getfd", syscall(SYS_pidfd_getfd, -1, 0, 0));
  report("keyctl", syscall(SYS_keyctl, 0x7fff, 0, 0, 0, 0));
  report("add_key", syscall(SYS_add_key, BAD, BAD, BAD, 0, 0));
  report("request_key", syscall(SYS_request_key, BAD, BAD, BAD, 0));
  report("bpf", syscall(SYS_bpf, 1 /* BPF_MAP_LOOKUP_ELEM */, BAD, 8));
  report("perf_event_open", syscall(SYS_perf_event_open, BAD, 0, -1, -1, ~0ul));  // unknown flags
  report("userfaultfd", syscall(SYS_userfaultfd, 0xffff));
  report("io_uring_setup", syscall(SYS_io_uring_setup, 1, BAD));
  report("open_by_handle_at", syscall(SYS_open_by_handle_at, -1, BAD, 0));
  report("name_to_handle_at", syscall(SYS_name_to_handle_at, -1, BAD, BAD, BAD, 0));
  report("init_module", syscall(SYS_init_module, BAD, 0, BAD));
  report("finit_module", syscall(SYS_finit_module, -1, BAD, 0));
  report("delete_module", syscall(SYS_delete_module, BAD, 0));
  report("kexec_load", syscall(SYS_kexec_load, 0, 17 /* > KEXEC_SEGMENT_MAX */, BAD, 0x8000 /* unknown */));
  report("reboot", syscall(SYS_reboot, 0, 0, 0, BAD));  // no magic: EINVAL even for root
  report("swapon", syscall(SYS_swapon, BAD, 0x40000000));  // an unknown flag, checked before the capability
  report("acct", syscall(SYS_acct, BAD));
  report("syslog", syscall(SYS_syslog, 10 /* SYSLOG_ACTION_SIZE_BUFFER */, BAD, 0));
  report("settimeofday", syscall(SYS_settimeofday, BAD, BAD));
  report("clock_settime", syscall(SYS_clock_settime, 0, BAD));
  report("adjtimex", syscall(SYS_adjtimex, BAD));
  report("sethostname", syscall(SYS_sethostname, BAD, -1));
  report("fsopen", syscall(SYS_fsopen, BAD, 0));
  report("open_tree", syscall(SYS_open_tree, -1, BAD, 0));
  report("move_mount", syscall(SYS_move_mount, -1, BAD, -1, BAD, 0));
  report("mount_setattr", syscall(SYS_mount_setattr, -1, BAD, 0, BAD, 0));
  report("personality_rie", syscall(SYS_personality, READ_IMPLIES_EXEC));
  report("socket_vsock", syscall(SYS_socket, 40 /* AF_VSOCK */, SOCK_STREAM, 0));
  report("socket_vsock_highbits", syscall(SYS_socket, 40 | (1ul << 32), SOCK_STREAM, 0));
  report("ioctl_tiocsti", syscall(SYS_ioctl, 0, TIOCSTI, BAD));
  report("ioctl_tiocsti_highbits", syscall(SYS_ioctl, 0, TIOCSTI | (1ul << 32), BAD));
  report_mknod();
  report("unknown_500", syscall(500));  // no kernel has assigned it yet
  // An allowed call still runs.
  report("getpid", syscall(SYS_getpid));
  return 0;
}

// Installs the BPF program in `path` (a seccomp::Program's code, as compile_cached writes
// it) as this process's filter, as the sandbox's init does: after no_new_privs. Without
// a listener, the other-ABI action answers ENOSYS instead of waiting on a supervisor.
static int install_filter(const char* path) {
  static struct sock_filter code[BPF_MAXINSNS];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) { fprintf(stderr, "open %s: %s\n", path, strerror(errno)); return -1; }
  ssize_t n = read(fd, code, sizeof code);
  close(fd);
  if (n <= 0 || n % sizeof code[0] != 0) { fprintf(stderr, "%s is not a BPF program\n", path); return -1; }
  struct sock_fprog prog = {(unsigned short)(n / sizeof code[0]), code};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) {
    fprintf(stderr, "install the filter: %s\n", strerror(errno));
    return -1;
  }
  return 0;
}

static int fork_bomb(void) {
  int gate[2];
  if (pipe(gate) != 0) return 1;
  int count = 0;
  for (;;) {
    pid_t pid = fork();
    if (pid == 0) {
      char b;
      close(gate[1]);
      (void)!read(gate[0], &b, 1);  // every child waits until the bomb is over
      _exit(0);
    }
    if (pid < 0) {
      printf("fork %s after %d processes\n", name_of(errno), count);
      break;
    }
    if (++count > 100000) break;
  }
  close(gate[1]);
  while (wait(NULL) > 0) {}
  fflush(stdout);
  return 0;
}

static int fill(const char* path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) { printf("open %s\n", name_of(errno)); return 1; }
  static char buf[1 << 20];
  memset(buf, 'x', sizeof buf);
  long long total = 0;
  for (;;) {
    ssize_t n = write(fd, buf, sizeof buf);
    if (n < 0) { printf("write %s after %lld bytes\n", name_of(errno), total); break; }
    total += n;
  }
  close(fd);
  unlink(path);
  return 0;
}

static int alloc(long mib) {
  for (long i = 0; i < mib; ++i) {
    char* p = malloc(1 << 20);
    if (!p) { printf("malloc failed after %ld MiB\n", i); return 1; }
    memset(p, 1, 1 << 20);
  }
  printf("allocated %ld MiB\n", mib);
  return 0;
}

static int fds(void) {
  DIR* d = opendir("/proc/self/fd");
  struct dirent* e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') printf("fd %s\n", e->d_name);
  closedir(d);
  return 0;
}

static int root_escape(void) {
  struct stat a, b;
  stat("/", &a);
  stat("/..", &b);
  printf("%s\n", a.st_ino == b.st_ino && a.st_dev == b.st_dev ? "root is closed" : "root escapes");
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) { fprintf(stderr, "usage: probe ACTION\n"); return 2; }
  const char* a = argv[1];
  if (!strcmp(a, "syscalls")) {
    if (argc > 2 && install_filter(argv[2]) != 0) return 1;
    return syscalls();
  }
  if (!strcmp(a, "x32")) { syscall(0x40000000 | SYS_getpid); printf("x32 returned\n"); return 0; }
  if (!strcmp(a, "int80")) {
    long rc;
    __asm__ volatile("int $0x80" : "=a"(rc) : "a"(20) : "memory");
    printf("int80 returned %ld\n", rc);
    return 0;
  }
  if (!strcmp(a, "fork-bomb")) return fork_bomb();
  if (!strcmp(a, "fill") && argc > 2) return fill(argv[2]);
  if (!strcmp(a, "alloc") && argc > 2) return alloc(atol(argv[2]));
  if (!strcmp(a, "fds")) return fds();
  if (!strcmp(a, "root")) return root_escape();
  fprintf(stderr, "unknown action %s\n", a);
  return 2;
}
