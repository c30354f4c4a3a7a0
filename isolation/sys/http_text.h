// Header text as HTTP defines it (RFC 9110), one implementation for the server's relays
// (a peer's answer, a sandbox port's tunnel) and the egress proxy's parsers.
#pragma once

#include <string_view>

namespace nsbox::sys {

// Header names and tokens compare without case, ASCII only (whatever the locale).
bool iequals(std::string_view a, std::string_view b);

// Whether header text holds a control character other than HTAB (which a field value may
// hold): CR or LF would split a head, so such a header is never relayed.
bool has_control(std::string_view text);

}  // namespace nsbox::sys
