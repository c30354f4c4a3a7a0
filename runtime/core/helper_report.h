// How nsbox's helper programs (nsbox-archive, nsbox-snapstore) are run and heard: the
// message of a failure on stderr's first line, a hint on a "hint: " line, its kind in the
// exit status (2 a refused input, 3 a limit, 4 not in the store); success, one JSON line
// on stdout.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "isolation/sys/error.h"

namespace nsbox {

// The error of a helper that failed with `status`, prefixed with `what`; a status of no
// kind above is `other`.
Error helper_error(const std::string& what, const std::string& program, const std::string& err, int status, ErrorCode other);
// A helper's one-line JSON report on stdout.
Result<nlohmann::json> helper_report(const std::string& what, const std::string& program, const std::string& out);

// Runs `argv` (argv[0] the helper's path) to its end within `timeout_s`, with nothing of
// the caller's environment; `out_fd` becomes its fd 3 (-1: none). Its report, or its error.
Result<nlohmann::json> run_helper(const std::vector<std::string>& argv, const std::string& what, double timeout_s, int out_fd = -1);

}  // namespace nsbox
