#include "isolation/sys/rfc3339.h"

#include <ctime>

namespace nsbox::sys {

std::string rfc3339(int64_t unix_seconds) {
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string now_rfc3339() { return rfc3339(std::time(nullptr)); }

}  // namespace nsbox::sys
