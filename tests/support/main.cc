#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <stdlib.h>

#include <iostream>

#include "tests/support/host_features.h"

namespace {

int cases_skipped = 0;
int cases_run = 0;  // not skipped: passed or failed

// A skipped test case's "SKIP: <reason> [doctor: <check>]" line (tests/report_skips reads
// it), printed when the case has ended, and only if nothing in it failed: a failure is
// reported as one, whatever the case announced before.
class SkipReporter : public Catch::TestEventListenerBase {
 public:
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseEnded(const Catch::TestCaseStats& stats) override {
    std::string reason = nsbox::test::take_announced_skip();
    if (!reason.empty() && stats.totals.assertions.failed == 0) {
      std::cout << "SKIP: " << reason << std::endl;
      ++cases_skipped;
      return;
    }
    if (!reason.empty()) std::cout << "(not skipped, it failed first: " << reason << ")" << std::endl;
    ++cases_run;
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(SkipReporter)

// CTest runs one test case per process: one that was skipped exits with kSkipExitCode,
// which CTest records as a skip (SKIP_RETURN_CODE); anything that failed exits 1 or more,
// and never with that code.
//
// --all-kernels-from-zygote: the zygote rerun's entries (tests/CMakeLists.txt), as
// NSBOX_TEST_ALL_KERNELS_FROM_ZYGOTE=1 is (tests/integration/kernel_zygote_test.cc): a
// flag, since a list of variables does not survive catch_discover_tests' PROPERTIES.
int main(int argc, char** argv) {
  Catch::Session session;
  bool from_zygote = false;
  session.cli(session.cli() | Catch::clara::Opt(from_zygote)["--all-kernels-from-zygote"](
                                  "every sandbox's kernel from one kernel zygote, checked (integration tests)"));
  if (int bad = session.applyCommandLine(argc, argv); bad != 0) return bad;
  if (from_zygote) ::setenv("NSBOX_TEST_ALL_KERNELS_FROM_ZYGOTE", "1", 1);
  int failed = session.run();
  if (failed != 0) return failed == nsbox::test::kSkipExitCode ? 1 : failed;
  return cases_skipped > 0 && cases_run == 0 ? nsbox::test::kSkipExitCode : 0;
}
