#include "runtime/core/helper_report.h"

#include <sys/wait.h>

#include "isolation/sys/program.h"

namespace nsbox {

using json = nlohmann::json;

Error helper_error(const std::string& what, const std::string& program, const std::string& err, int status, ErrorCode other) {
  std::string message = err.substr(0, err.find('\n')), hint;
  if (auto at = err.find("\nhint: "); at != std::string::npos) hint = err.substr(at + 7, err.find('\n', at + 7) - at - 7);
  ErrorCode code = status == 2   ? ErrorCode::kInvalidArgument
                   : status == 3 ? ErrorCode::kLimitExceeded
                   : status == 4 ? ErrorCode::kNotFound
                                 : other;
  return make_error(code, what + ": " + (message.empty() ? program + " failed" : message), hint);
}

Result<json> helper_report(const std::string& what, const std::string& program, const std::string& out) {
  auto report = json::parse(out, nullptr, false);
  if (!report.is_object()) return fail(make_error(ErrorCode::kInternal, what + ": " + program + " gave no report"));
  return report;
}

Result<json> run_helper(const std::vector<std::string>& argv, const std::string& what, double timeout_s, int out_fd) {
  constexpr size_t kMaxReport = 64 << 10;
  const std::string program = argv.front().substr(argv.front().rfind('/') + 1);
  auto run = sys::run_program(argv, "", {"PATH=/usr/bin:/bin"}, "", timeout_s, kMaxReport, kMaxReport, out_fd);
  std::string err = run.err;
  while (!err.empty() && err.back() == '\n') err.pop_back();
  if (run.status == -1) return fail(make_error(ErrorCode::kSystem, what + ": could not run " + argv.front() + ": " + err));
  if (run.timed_out) return fail(make_error(ErrorCode::kTimeout, what + ": took more than " + std::to_string(int(timeout_s)) + " s"));
  if (!WIFEXITED(run.status) || WEXITSTATUS(run.status) != 0)
    return fail(helper_error(what, program, err, WIFEXITED(run.status) ? WEXITSTATUS(run.status) : 1, ErrorCode::kSystem));
  return helper_report(what, program, run.out);
}

}  // namespace nsbox
