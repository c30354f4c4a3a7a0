// What the bucket clients put on the wire and read from it does not depend on the
// process's locale: HTTP dates are English, and SigV4's and Azure's canonical forms
// encode and lower-case ASCII only. The locale used is Turkish in ISO-8859-9, where
// strptime knows no "Mon", isalnum() takes the bytes of UTF-8 letters for letters and
// tolower('I') is a dotless 'ı': compiled from Debian's locale sources into a temporary
// directory (LOCPATH), since a build host has only C.UTF-8.
#include <locale.h>
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <optional>
#include <string>

#include "mounts/bucket/remote_reply.h"
#include "mounts/bucket/sigv4.h"
#include "tests/support/host_features.h"
#include "tests/support/process.h"

using namespace nsbox::bucket;

namespace {

constexpr const char* kLocale = "tr_TR.ISO-8859-9";

// A locale compiled for this test and made the calling thread's (uselocale), then undone.
class ThreadLocale {
 public:
  ThreadLocale() {
    char dir[] = "/tmp/nsbox-locale-XXXXXX";
    if (!::mkdtemp(dir)) {
      why_not_ = "mkdtemp failed";
      return;
    }
    dir_ = dir;
    if (!std::filesystem::exists("/usr/share/i18n/locales/tr_TR") || !std::filesystem::exists("/usr/bin/localedef")) {
      why_not_ = "no localedef or locale sources (/usr/share/i18n/locales: Debian's locales package)";
      return;
    }
    auto made = nsbox::test::run_process({"/usr/bin/localedef", "-i", "tr_TR", "-f", "ISO-8859-9", dir_ + "/" + kLocale});
    // localedef says 1 for warnings too: what counts is the compiled locale.
    if (!std::filesystem::exists(dir_ + "/" + kLocale + "/LC_CTYPE")) {
      why_not_ = "localedef failed (exit " + std::to_string(made.exit_code) + "): " + made.err;
      return;
    }
    const char* old = ::getenv("LOCPATH");
    old_locpath_ = old ? std::optional<std::string>(old) : std::nullopt;
    ::setenv("LOCPATH", dir_.c_str(), 1);  // newlocale reads it at each call
    locale_ = ::newlocale(LC_ALL_MASK, kLocale, nullptr);
    if (!locale_) why_not_ = std::string("newlocale(") + kLocale + ") failed";
    else previous_ = ::uselocale(locale_);
  }
  ~ThreadLocale() {
    if (locale_) {
      ::uselocale(previous_);
      ::freelocale(locale_);
    }
    if (old_locpath_) ::setenv("LOCPATH", old_locpath_->c_str(), 1);
    else ::unsetenv("LOCPATH");
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  bool active() const { return locale_ != nullptr; }
  const std::string& why_not() const { return why_not_; }

 private:
  std::string dir_, why_not_;
  std::optional<std::string> old_locpath_;
  locale_t locale_ = nullptr;
  locale_t previous_ = nullptr;
};

constexpr std::time_t kNov30 = 1796000523;  // Mon, 30 Nov 2026 01:02:03 GMT

}  // namespace

TEST_CASE("an HTTP date is read the same in a Turkish locale as in C") {
  ThreadLocale turkish;
  if (!turkish.active()) {
    NSBOX_NEEDS(nsbox::test::installed("/usr/bin/localedef", "libc-bin"));
    NSBOX_NEEDS(nsbox::test::installed("/usr/share/i18n/locales/tr_TR", "locales"));
    FAIL("cannot compile the " << kLocale << " locale: " << turkish.why_not());
  }
  // The locale really is in force: its own names are not English.
  char day[32];
  std::tm monday{};
  monday.tm_wday = 1;
  std::strftime(day, sizeof day, "%a", &monday);
  REQUIRE(std::string(day) != "Mon");

  CHECK(nsbox::http::parse_date("Mon, 30 Nov 2026 01:02:03 GMT") == kNov30);
  CHECK(nsbox::http::parse_date("Sun, 06 Nov 1994 08:49:37 GMT") == 784111777);
  CHECK(nsbox::http::parse_date("not a date") == 0);
}

TEST_CASE("an HTTP date in the obsolete forms recipients must read (RFC 850, asctime) is read") {
  CHECK(nsbox::http::parse_date("Mon, 30 Nov 2026 01:02:03 GMT") == kNov30);
  CHECK(nsbox::http::parse_date("Sunday, 06-Nov-94 08:49:37 GMT") == 784111777);
  CHECK(nsbox::http::parse_date("Sun Nov  6 08:49:37 1994") == 784111777);
  CHECK(nsbox::http::parse_date("") == 0);
}

TEST_CASE("URI encoding and header names for signing are ASCII-only in a Latin locale") {
  ThreadLocale turkish;
  if (!turkish.active()) {
    NSBOX_NEEDS(nsbox::test::installed("/usr/bin/localedef", "libc-bin"));
    NSBOX_NEEDS(nsbox::test::installed("/usr/share/i18n/locales/tr_TR", "locales"));
    FAIL("cannot compile the " << kLocale << " locale: " << turkish.why_not());
  }
  REQUIRE(::isalnum(0xC3));  // the locale's letters include the lead byte of UTF-8's "é"
  // "café/ü" in UTF-8: every byte above 0x7f is percent-encoded, as AWS's and Azure's
  // canonical forms (and botocore) have it.
  CHECK(uri_encode("caf\xC3\xA9/\xC3\xBC", true) == "caf%C3%A9/%C3%BC");
  CHECK(uri_encode("caf\xC3\xA9/\xC3\xBC", false) == "caf%C3%A9%2F%C3%BC");
  CHECK(uri_encode("A-z_0.9~") == "A-z_0.9~");
  CHECK(lowercase("X-Amz-Meta-ID") == "x-amz-meta-id");  // not a dotless 'ı' (0xFD)
  CHECK(canonical_query({{"Id", "\xC3\xA9"}}) == "Id=%C3%A9");
}
