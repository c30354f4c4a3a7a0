// nsbox-kernel: the stateful Python interpreter of a sandbox (docs/semantics.md, "Cells").
//
// Started by the sandbox's init with the control socket as fd 3 and its stdout/stderr on
// pipes the supervisor reads. This C++ half starts the interpreter (kernel/python_start.h),
// then hands over to nsbox_kernel.serve() (kernel/python/), which runs the cells.
//
//   nsbox-kernel [--python-path DIR] [--control-fd N] [--preload MOD,MOD...] [--merge]
//   --preload:      imported before the kernel reports ready (a warm pool's data stack);
//                   one that fails is said on stderr, the first cell's
//   --merge:        the heap left by the preload offered to kernel same-page merging
//                   (KSM). Kernels that import the same modules the same way then hold
//                   mostly equal pages, but only with the same layout: the process runs
//                   without address-space randomisation (re-exec'd so) and with a fixed
//                   str hash seed. docs/design.md, "Memory merging".
//   fd N (3):       frames with the supervisor: cells in, results, progress and helper
//                   calls out (docs/protocol.md)
//   stdout, stderr: the running cell's output, read by the supervisor
//   stdin:          /dev/null (input() fails at once)
#include <Python.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernel/private_mappings.h"
#include "kernel/python_start.h"

namespace {

// Marks every private, writable, anonymous mapping mergeable (the heap and the arenas the
// imports made). What is mapped later is the user's own data and stays unmerged. A
// mapping the kernel refuses is left as it is: merging only saves memory.
void offer_heap_to_ksm() {
  nsbox::kernel::for_each_private_writable_mapping([](const nsbox::kernel::Mapping& m) {
    if (m.anonymous && m.name != "[stack]") (void)::madvise(m.start, m.length, MADV_MERGEABLE);
  });
}

}  // namespace

int main(int argc, char** argv) {
  std::string python_path = "/opt/nsbox/python";
  std::string preload;
  int control_fd = 3;
  bool merge = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--merge")) merge = true;
    else if (i + 1 < argc && !std::strcmp(argv[i], "--python-path")) python_path = argv[++i];
    else if (i + 1 < argc && !std::strcmp(argv[i], "--control-fd")) control_fd = std::atoi(argv[++i]);
    else if (i + 1 < argc && !std::strcmp(argv[i], "--preload")) preload = argv[++i];
  }
  // Module names only reach the source: letters, digits, '_', '.' and the commas.
  if (preload.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.,") != std::string::npos) {
    std::fprintf(stderr, "nsbox-kernel: --preload takes module names separated by commas\n");
    return 2;
  }
  // The same layout in every merging kernel: without randomisation from the exec on.
  if (merge) {
    int persona = ::personality(0xffffffff);
    if (persona != -1 && !(persona & ADDR_NO_RANDOMIZE) && ::personality(persona | ADDR_NO_RANDOMIZE) != -1) {
      ::execv("/proc/self/exe", argv);
      std::perror("nsbox-kernel: re-exec without address randomisation");  // then merging merely saves less
    }
  }

  if (auto failed = nsbox::kernel::start_python(merge)) return *failed;  // equal dicts and sets in every merging kernel

  std::string setup = "import sys\nsys.path.insert(0, '" + python_path + "')\nimport nsbox_kernel\nnsbox_kernel.prepare('" +
                      preload + "')\n";
  int rc = PyRun_SimpleString(setup.c_str());
  if (rc == 0 && merge) offer_heap_to_ksm();
  std::string start = "sys.exit(nsbox_kernel.serve(" + std::to_string(control_fd) + "))\n";
  if (rc == 0) rc = PyRun_SimpleString(start.c_str());  // SystemExit from serve() exits here with its code
  if (Py_FinalizeEx() < 0 && rc == 0) rc = 120;
  return rc == 0 ? 0 : 1;
}
