// Percent-encoding (RFC 3986), one implementation for the request signers (SigV4, Azure
// SAS), the tool bridge's URL templates and the server's signed links.
#pragma once

#include <string>
#include <string_view>

namespace nsbox::sys {

// Everything but the unreserved A-Z a-z 0-9 - _ . ~ (ASCII only, whatever the locale),
// and '/' when `keep_slash` (paths), becomes %XX with upper-case hex.
std::string uri_encode(std::string_view s, bool keep_slash = false);

}  // namespace nsbox::sys
