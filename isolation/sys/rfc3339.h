// Times as nsbox writes them everywhere (records, links' expiry, denial logs, recordings):
// RFC 3339 in UTC, to the second, "2026-12-01T18:00:00Z".
#pragma once

#include <cstdint>
#include <string>

namespace nsbox::sys {

std::string rfc3339(int64_t unix_seconds);
std::string now_rfc3339();

}  // namespace nsbox::sys
