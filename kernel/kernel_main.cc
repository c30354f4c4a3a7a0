// nsbox-kernel: the stateful Python interpreter of a sandbox (docs/semantics.md, "Cells").
//
// Started by the sandbox's init with the control socket as fd 3 and its stdout/stderr on
// pipes the supervisor reads. This C++ half sets the interpreter up — sys.executable is
// the real /usr/bin/python3.11, so subprocess, multiprocessing and `python -m pip` work;
// stdio unbuffered, so print() and C-level writes to fd 1/2 keep their order — then hands
// over to nsbox_kernel.serve() (kernel/python/), which runs the cells.
//
//   nsbox-kernel [--python-path DIR] [--control-fd N]
//   fd N (3):       frames with the supervisor: cells in, results, progress and helper
//                   calls out (docs/protocol.md)
//   stdout, stderr: the running cell's output, read by the supervisor
//   stdin:          /dev/null (input() fails at once)
#include <Python.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace {

constexpr const wchar_t* kPython = L"/usr/bin/python3.11";

int fail(PyStatus status) {
  if (PyStatus_IsExit(status)) return status.exitcode;
  std::fprintf(stderr, "nsbox-kernel: cannot start Python: %s\n", status.err_msg ? status.err_msg : "unknown error");
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string python_path = "/opt/nsbox/python";
  int control_fd = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--python-path")) python_path = argv[i + 1];
    if (!std::strcmp(argv[i], "--control-fd")) control_fd = std::atoi(argv[i + 1]);
  }

  PyConfig config;
  PyConfig_InitPythonConfig(&config);
  config.buffered_stdio = 0;
  config.parse_argv = 0;
  config.site_import = 1;
  PyStatus status = PyConfig_SetString(&config, &config.program_name, kPython);
  if (!PyStatus_Exception(status)) status = PyConfig_SetString(&config, &config.executable, kPython);
  if (!PyStatus_Exception(status)) {
    wchar_t* empty[] = {const_cast<wchar_t*>(L"")};
    status = PyConfig_SetArgv(&config, 1, empty);
  }
  if (!PyStatus_Exception(status)) status = Py_InitializeFromConfig(&config);
  PyConfig_Clear(&config);
  if (PyStatus_Exception(status)) return fail(status);

  std::string start = "import sys\nsys.path.insert(0, " + std::string("'") + python_path +
                      "')\nimport nsbox_kernel\nsys.exit(nsbox_kernel.serve(" + std::to_string(control_fd) + "))\n";
  int rc = PyRun_SimpleString(start.c_str());  // SystemExit from serve() exits here with its code
  if (Py_FinalizeEx() < 0 && rc == 0) rc = 120;
  return rc == 0 ? 0 : 1;
}
