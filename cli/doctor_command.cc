// doctor: what this host can do, and the fix for what it cannot.
#include <unistd.h>

#include "cli/context.h"
#include "isolation/preflight.h"

namespace nsbox::cli {

int cmd_doctor(const Invocation& inv) {
  int code = 0;
  auto ctx = prepare(inv, {}, code, /*open_runtime=*/false);
  if (!ctx) return code;
  auto checks = preflight::run_all();
  bool failed = false;
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& c : checks) {
    failed = failed || c.level == preflight::Level::kFail;
    nlohmann::json j = {{"name", c.name}, {"level", preflight::level_name(c.level)}, {"detail", c.detail}};
    if (!c.fix.empty()) j["fix"] = c.fix;
    arr.push_back(j);
    if (ctx->out.json) continue;
    const char* mark = c.level == preflight::Level::kOk ? "ok  " : c.level == preflight::Level::kWarn ? "WARN" : "FAIL";
    ctx->out.line(std::string("[") + mark + "] " + c.name + ": " + c.detail);
    if (!c.fix.empty()) ctx->out.line("       fix: " + c.fix);
  }
  std::string mode = ::geteuid() == 0 ? "root" : "rootless";
  if (ctx->out.json) ctx->out.document({{"mode", mode}, {"checks", arr}, {"ok", !failed}});
  else ctx->out.line(failed ? "nsbox cannot run sandboxes here until the failures above are fixed (" + mode + " mode)"
                            : "nsbox can run sandboxes here (" + mode + " mode)");
  return failed ? kExitError : 0;
}

}  // namespace nsbox::cli
