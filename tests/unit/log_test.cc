// The host-side log a sandbox can make lines in: rate-limited per kind, rotated by size.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "isolation/sys/files.h"
#include "isolation/sys/log.h"

namespace {

// stderr goes to a log file for the test's length, and comes back after.
struct StderrToLog {
  std::string dir;
  int saved = ::dup(STDERR_FILENO);
  StderrToLog() {
    char tmpl[] = "/tmp/nsbox-test-log-XXXXXX";
    REQUIRE(::mkdtemp(tmpl));
    dir = tmpl;
    nsbox::log::reset_limits_for_test();
    REQUIRE(nsbox::log::open_file(dir + "/test.log"));
  }
  ~StderrToLog() {
    ::dup2(saved, STDERR_FILENO);
    ::close(saved);
    std::filesystem::remove_all(dir);
  }
  uint64_t size(const std::string& name) const {
    struct stat st{};
    return ::stat((dir + "/" + name).c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  }
};

}  // namespace

TEST_CASE("a flood of one kind of log line is cut to a burst, and what was dropped is counted") {
  StderrToLog log;
  for (int i = 0; i < 100000; ++i) nsbox::log::limited(nsbox::log::Level::kWarn, "flood", "ignored a malformed message");
  nsbox::log::limited(nsbox::log::Level::kWarn, "other", "a different kind still gets through");
  nsbox::log::report_dropped();
  auto text = nsbox::files::read_file(log.dir + "/test.log");
  REQUIRE(text);
  CHECK(std::count(text->begin(), text->end(), '\n') <= nsbox::log::kBurstLines + 3);
  CHECK(text->find("a different kind still gets through") != std::string::npos);
  CHECK(text->find("more lines of kind flood were not logged") != std::string::npos);
  CHECK(text->find(" warn: ignored a malformed message") != std::string::npos);
}

TEST_CASE("a log past its size limit is rotated once, so two files hold it all") {
  StderrToLog log;
  std::string line(1000, 'x');
  for (int i = 0; i < 10000; ++i) nsbox::log::info(line);  // 10 MB
  CHECK(log.size("test.log") <= nsbox::log::kMaxFileBytes);
  CHECK(log.size("test.log.1") <= nsbox::log::kMaxFileBytes);
  CHECK(log.size("test.log.1") > nsbox::log::kMaxFileBytes / 2);
}

TEST_CASE("log lines cannot be forged with newlines or escapes, and long messages are cut") {
  StderrToLog log;
  nsbox::log::warn("name\n2026-01-01T00:00:00.000Z nsbox-supervisor error: forged\x1b[2J");
  nsbox::log::warn(std::string(100000, 'y'));
  auto text = nsbox::files::read_file(log.dir + "/test.log");
  REQUIRE(text);
  CHECK(std::count(text->begin(), text->end(), '\n') == 2);
  CHECK(text->find("name\\x0a2026") != std::string::npos);
  CHECK(text->find('\x1b') == std::string::npos);
  CHECK(text->size() < 5000);
}
