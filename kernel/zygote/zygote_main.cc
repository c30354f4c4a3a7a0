// nsbox-kernel-zygote: forks Python kernels for the sandboxes of one `nsbox serve
// --kernel-zygote` (docs/kernel-zygote.md). Started by the server (runtime/
// kernel_zygote_process.h) as root, with the environment every kernel starts with.
//
//   nsbox-kernel-zygote --listen-fd N --sandbox-dir DIR --ready-fd M
//   --listen-fd:   a listening SOCK_SEQPACKET socket only root can reach
//   --sandbox-dir: what sandboxes see as /opt/nsbox; mounted there in the zygote's own
//                  mount namespace, so that the modules and paths the kernels inherit
//                  are the ones a sandbox has
//   --ready-fd:    gets "1" and is closed once requests are served
#include <Python.h>
#include <fcntl.h>
#include <malloc.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <fstream>
#include <span>
#include <string>

#include "isolation/seccomp_policy.h"
#include "kernel/python_start.h"
#include "kernel/zygote/zygote_pages.h"
#include "kernel/zygote/zygote_server.h"

namespace {

int fail(const std::string& what) {
  std::fprintf(stderr, "nsbox-kernel-zygote: %s: %s\n", what.c_str(), std::strerror(errno));
  return 1;
}

// /opt/nsbox as a sandbox has it, in a mount namespace of our own (slave: the host's
// unmounts still reach it where the host's mounts are shared); and nothing of the host's
// users' files where the interpreter's start might look (a host account named `user`
// would otherwise have its site-packages run here, as root).
int mount_sandbox_dir(const std::string& dir) {
  if (::unshare(CLONE_NEWNS) != 0) return fail("unshare(CLONE_NEWNS)");
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) return fail("make / a slave mount");
  // Opened in the new namespace (a bind's source must be in it), before /opt is covered:
  // the directory may be under it.
  int source = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (source < 0) return fail("open " + dir);
  if (::mount("nsbox-zygote", "/opt", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k") != 0) return fail("mount a tmpfs on /opt");
  if (::mkdir("/opt/nsbox", 0755) != 0) return fail("mkdir /opt/nsbox");
  std::string from = "/proc/self/fd/" + std::to_string(source);
  if (::mount(from.c_str(), "/opt/nsbox", nullptr, MS_BIND | MS_REC, nullptr) != 0) return fail("bind " + dir + " on /opt/nsbox");
  if (::mount(nullptr, "/opt/nsbox", nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) != 0)
    return fail("make /opt/nsbox read-only");
  ::close(source);
  for (const char* hidden : {"/home", "/root", "/tmp", "/var/tmp"})
    if (::mount("nsbox-zygote", hidden, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k") != 0 && errno != ENOENT)
      return fail(std::string("cover ") + hidden);
  return 0;
}

bool single_threaded() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.starts_with("Threads:")) return std::atoi(line.c_str() + 8) == 1;
  return false;
}

// In a kernel, once it is the sandbox's: nsbox_kernel.zygote.child(config), which never
// returns but by SystemExit (PyRun exits the process with its code).
int run_kernel(const std::string& config) {
  PyObject* module = PyImport_ImportModule("nsbox_kernel.zygote");
  PyObject* bytes = PyBytes_FromStringAndSize(config.data(), static_cast<Py_ssize_t>(config.size()));
  PyObject* result = module && bytes ? PyObject_CallMethod(module, "child", "O", bytes) : nullptr;
  if (!result) PyErr_Print();  // a SystemExit ends the process here, with its code
  int rc = result && PyLong_Check(result) ? static_cast<int>(PyLong_AsLong(result)) : result ? 0 : 1;
  Py_XDECREF(result);
  Py_XDECREF(bytes);
  Py_XDECREF(module);
  if (Py_FinalizeEx() < 0 && rc == 0) rc = 120;
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  int listen_fd = -1, ready_fd = -1;
  std::string sandbox_dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--listen-fd")) listen_fd = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--ready-fd")) ready_fd = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--sandbox-dir")) sandbox_dir = argv[i + 1];
  }
  if (listen_fd < 0 || ready_fd < 0 || sandbox_dir.empty()) {
    std::fprintf(stderr, "usage: nsbox-kernel-zygote --listen-fd N --sandbox-dir DIR --ready-fd M\n");
    return 2;
  }
  // The loader has read it (kernel/zygote_keeper/kernel_zygote_process.cc); kernels do not inherit it.
  ::unsetenv("LD_BIND_NOW");
  // Out of the server's session: its terminal's signals are not ours.
  (void)::setsid();
  // Our arguments name the host's install directory, and a kernel's /proc/<pid>/cmdline
  // shows them until it renames itself: blanked now (kernels write theirs over it).
  std::span<char> arguments(argv[0], static_cast<size_t>(argv[argc - 1] + std::strlen(argv[argc - 1]) + 1 - argv[0]));
  std::memset(arguments.data(), 0, arguments.size());
  std::memcpy(arguments.data(), "nsbox-kernel-zygote", std::min(arguments.size() - 1, sizeof "nsbox-kernel-zygote" - 1));
  if (int failed = mount_sandbox_dir(sandbox_dir)) return failed;
  auto program = nsbox::seccomp::compile();
  if (!program) {
    std::fprintf(stderr, "nsbox-kernel-zygote: %s\n", program.error().message.c_str());
    return 1;
  }
  if (auto failed = nsbox::kernel::start_python(/*fixed_hash_seed=*/false, /*user_site=*/false)) return *failed;
  // What every kernel imports before it reads anything of its sandbox; nothing that reads
  // the environment or a sandbox's files (docs/kernel-zygote.md).
  // The collector off while importing, then every object frozen out of its reach: a
  // collection in a child would write to each of the zygote's objects, copying every page
  // of the heap into every kernel (the child enables it again: nsbox_kernel/zygote.py).
  if (PyRun_SimpleString("import gc, sys\ngc.disable()\nsys.path.insert(0, '/opt/nsbox/python')  # as kernel_main.cc does\n"
                         "import nsbox_kernel, nsbox_kernel.zygote\ngc.freeze()\n") != 0) return 1;
  // What the imports allocated and freed goes back to the system: every page still
  // present is copied into every kernel.
  (void)::malloc_trim(0);
  // Then what is left pinned, so that each fork copies it into the kernel at once
  // (kernel/zygote/zygote_pages.h); without, each kernel copies it after the fork.
  auto pinned = nsbox::kernel::pin_present_writable_pages();
  if (pinned)
    std::fprintf(stderr, "nsbox-kernel-zygote: %zu KiB of pages pinned in %zu runs: each kernel gets its copy at the fork\n",
                 pinned->bytes >> 10, pinned->runs);
  else
    std::fprintf(stderr, "nsbox-kernel-zygote: pages not pinned (%s): each kernel copies them after the fork\n",
                 pinned.error().message.c_str());
  if (!single_threaded()) {
    std::fprintf(stderr, "nsbox-kernel-zygote: a thread was started while importing: cannot fork safely\n");
    return 1;
  }
  if (::write(ready_fd, "1", 1) != 1) return fail("write the ready byte");
  ::close(ready_fd);
  return nsbox::kernel::serve_forks(listen_fd, *program, arguments, run_kernel);
}
