// A request's target (`/v1/sandboxes/x/files?path=a%20b`) as the handlers see it: the
// path and the query, percent-decoded, and the path's segments. Pure functions of the
// bytes a client sent, fuzzed by tests/fuzz/http_request.cc.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "api/exchange.h"

namespace nsbox::api {

// %XX escapes decoded (a bad one is malformed_request); in a query, '+' is a space.
Result<std::string> percent_decode(std::string_view text, bool query);
// Sets r.path and r.query from `target`; a repeated key keeps its last value.
Result<void> parse_target(std::string_view target, HttpRequest& r);
// The path's segments, empty ones dropped: "/v1//sandboxes/" -> {"v1", "sandboxes"}.
std::vector<std::string> split_path(const std::string& path);

}  // namespace nsbox::api
