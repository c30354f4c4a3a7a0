// A port number, as the CLI, the HTTP API, a tunnel's URL and the supervisor's requests
// give one: from `least` (1, or 0 for "any free one") to 65535.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "isolation/sys/error.h"
#include "runtime/protocol/frame.h"

namespace nsbox {

// As text (a flag's value, a URL's part): decimal digits only, no sign, no space.
std::optional<uint16_t> parse_port(std::string_view text, unsigned least = 1);

// The integer `key` of a request document; absent, `fallback` when there is one. The error
// (of `code`) names the key and the range.
Result<uint16_t> port_field(const protocol::Json& doc, const char* key, unsigned least,
                            std::optional<uint16_t> fallback = std::nullopt, ErrorCode code = ErrorCode::kInvalidArgument);

}  // namespace nsbox
