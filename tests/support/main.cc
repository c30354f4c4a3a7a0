#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <iostream>

#include "tests/support/host_features.h"

namespace {

// The "SKIP: " line that CTest reads is printed when the test case has ended, and only
// if nothing in it failed: CTest's SKIP_REGULAR_EXPRESSION wins over a failure, so a
// line printed earlier would hide one.
class SkipReporter : public Catch::TestEventListenerBase {
 public:
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseEnded(const Catch::TestCaseStats& stats) override {
    std::string reason = nsbox::test::take_announced_skip();
    if (reason.empty()) return;
    if (stats.totals.assertions.failed == 0) std::cout << "SKIP: " << reason << std::endl;
    else std::cout << "(not skipped, it failed first: " << reason << ")" << std::endl;
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(SkipReporter)
