#include "kernel/python_start.h"

#include <Python.h>

#include <cstdio>

namespace nsbox::kernel {
namespace {

constexpr const wchar_t* kPython = L"/usr/bin/python3.11";

int fail(PyStatus status) {
  if (PyStatus_IsExit(status)) return status.exitcode;
  std::fprintf(stderr, "nsbox-kernel: cannot start Python: %s\n", status.err_msg ? status.err_msg : "unknown error");
  return 1;
}

}  // namespace

std::optional<int> start_python(bool fixed_hash_seed, bool user_site) {
  PyConfig config;
  PyConfig_InitPythonConfig(&config);
  config.buffered_stdio = 0;
  config.parse_argv = 0;
  config.site_import = 1;
  config.user_site_directory = user_site ? 1 : 0;
  if (fixed_hash_seed) {
    config.use_hash_seed = 1;
    config.hash_seed = 0;
  }
  PyStatus status = PyConfig_SetString(&config, &config.program_name, kPython);
  if (!PyStatus_Exception(status)) status = PyConfig_SetString(&config, &config.executable, kPython);
  if (!PyStatus_Exception(status)) {
    wchar_t* empty[] = {const_cast<wchar_t*>(L"")};
    status = PyConfig_SetArgv(&config, 1, empty);
  }
  if (!PyStatus_Exception(status)) status = Py_InitializeFromConfig(&config);
  PyConfig_Clear(&config);
  if (PyStatus_Exception(status)) return fail(status);
  return std::nullopt;
}

}  // namespace nsbox::kernel
