// Linked into every host-side program of the sanitizer builds (tests/fuzz/
// sanitizers.cmake): the options ASan and UBSan start with, before ASAN_OPTIONS and
// UBSAN_OPTIONS from the environment (which nsbox does not pass to the supervisor's
// children). Each report goes to a file of its own in NSBOX_SANITIZER_REPORTS
// (<program>.<pid>), which `make test-asan` lists and fails on: a detached supervisor or
// bucket server has no terminal, and its log goes away with the sandbox.
extern "C" {

const char* __asan_default_options() {
  return "log_path=" NSBOX_SANITIZER_REPORTS "/asan:log_exe_name=1:detect_stack_use_after_return=1:"
         "strict_string_checks=1:check_initialization_order=1:"
         // A report file is a failure: the list of suppressions used is not one.
         "print_suppressions=0";
}

const char* __ubsan_default_options() {
  return "log_path=" NSBOX_SANITIZER_REPORTS "/ubsan:log_exe_name=1:print_stacktrace=1:halt_on_error=1";
}

// Leaks that are glibc's, not nsbox's: newlocale keeps the LOCPATH list it builds.
const char* __lsan_default_suppressions() { return "leak:__newlocale\nleak:__argz_add_sep\n"; }

}  // extern "C"
