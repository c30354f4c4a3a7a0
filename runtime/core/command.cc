#include "runtime/core/command.h"

#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>

#include "isolation/sys/program.h"
#include "runtime/core/package_sources.h"

namespace nsbox {

protocol::Json CommandRequest::to_json() const {
  protocol::Json env_obj = protocol::Json::object();
  for (const auto& [k, v] : env) env_obj[k] = v;
  protocol::Json j = {{"argv", argv}, {"env", env_obj}, {"timeout_s", timeout_s}, {"output_dir", output_dir}};
  if (!cwd.empty()) j["cwd"] = cwd;
  if (!run_as.empty()) j["run_as"] = run_as;
  return j;
}

Result<std::string> parse_output_dir(const protocol::Json& value) {
  if (value.is_string() && (value == kOutputDir || value == kComposioOutputDir)) return value.get<std::string>();
  return fail(make_error(ErrorCode::kInvalidArgument, std::string("\"output_dir\" must be \"") + kOutputDir + "\" or \"" +
                                                          kComposioOutputDir + "\""));
}

Result<std::string> cwd_of(const protocol::Json& request) {
  auto cwd = request.find("cwd");
  if (cwd == request.end() || cwd->is_null()) return std::string();
  if (!cwd->is_string() || cwd->get<std::string>().empty() || cwd->get<std::string>()[0] != '/' ||
      !protocol::is_valid_utf8(cwd->get<std::string>()))
    return fail(make_error(ErrorCode::kInvalidArgument, "\"cwd\" must be an absolute path (UTF-8)"));
  return cwd->get<std::string>();
}

Result<std::string> run_as_of(const protocol::Json& request) {
  auto who = request.find("run_as");
  if (who == request.end() || who->is_null()) return std::string();
  if (!who->is_string() || who->get<std::string>().empty() || who->get<std::string>().size() > 64 ||
      !protocol::is_valid_utf8(who->get<std::string>()))
    return fail(make_error(ErrorCode::kInvalidArgument, "\"run_as\" must be the name of one of the sandbox's users"));
  return who->get<std::string>();
}

Result<CommandRequest> CommandRequest::from_json(const protocol::Json& j) {
  CommandRequest r;
  auto bad = [](std::string what) { return fail(make_error(ErrorCode::kInvalidArgument, std::move(what))); };
  auto argv = j.find("argv");
  if (argv == j.end() || !argv->is_array() || argv->empty()) return bad("exec needs a non-empty \"argv\" array");
  for (const auto& a : *argv) {
    if (!a.is_string()) return bad("every element of \"argv\" must be a string");
    r.argv.push_back(a.get<std::string>());
  }
  if (r.argv[0].empty()) return bad("the command name is empty");
  if (auto env = j.find("env"); env != j.end()) {
    if (!env->is_object()) return bad("\"env\" must be an object of strings");
    for (auto it = env->begin(); it != env->end(); ++it) {
      if (!it.value().is_string()) return bad("env value of " + it.key() + " must be a string");
      r.env.emplace_back(it.key(), it.value().get<std::string>());
    }
  }
  r.cwd = NSBOX_TRY(cwd_of(j));
  r.run_as = NSBOX_TRY(run_as_of(j));
  if (auto t = j.find("timeout_s"); t != j.end()) {
    if (!t->is_number() || !(t->get<double>() > 0) || t->get<double>() > 86400 || std::isnan(t->get<double>()))
      return bad("\"timeout_s\" must be a number of seconds in (0, 86400]");
    r.timeout_s = t->get<double>();
  }
  if (auto d = j.find("output_dir"); d != j.end()) r.output_dir = NSBOX_TRY(parse_output_dir(*d));
  return r;
}

namespace {

// Text that crosses the protocol as JSON must be UTF-8: anything else would be rewritten
// on the way (JSON strings are Unicode), so it is refused rather than changed.
Result<void> check_utf8(std::string_view what, std::string_view value) {
  if (protocol::is_valid_utf8(value)) return {};
  return fail(make_error(ErrorCode::kInvalidArgument, std::string(what) + " is not UTF-8 text",
                         "nsbox passes arguments and environment values as UTF-8; encode the bytes (base64, say)"));
}

}  // namespace

Result<void> check_env(const EnvList& env) {
  for (const auto& [k, v] : env) {
    NSBOX_CHECK(check_utf8("the name of an environment variable", k));
    NSBOX_CHECK(check_utf8("the value of " + k, v));
  }
  return {};
}

bool env_read_at_process_start(std::string_view name) {
  for (std::string_view prefix : {"PYTHON", "LD_", "GLIBC_", "OMP_", "OPENBLAS_", "MKL_", "NUMEXPR_", "MPL", "MALLOC_", "LC_", "LANG"})
    if (name.starts_with(prefix)) return true;
  return name == "TZ" || name == "HOME" || name == "PATH" || name == "TMPDIR";
}

Result<void> CommandRequest::check() const {
  for (size_t i = 0; i < argv.size(); ++i) NSBOX_CHECK(check_utf8("argument " + std::to_string(i), argv[i]));
  NSBOX_CHECK(check_utf8("the working directory", cwd));
  return check_env(env);
}

Result<std::pair<std::string, std::string>> parse_env_assignment(const std::string& text) {
  auto eq = text.find('=');
  std::string key = text.substr(0, eq);
  bool ok = eq != std::string::npos && !key.empty() && !(key[0] >= '0' && key[0] <= '9');
  for (char c : key) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
  if (!ok)
    return fail(make_error(ErrorCode::kInvalidArgument, "invalid environment assignment '" + text + "'",
                           "use NAME=VALUE, NAME made of letters, digits and '_'"));
  NSBOX_CHECK(check_utf8("the value of " + key, std::string_view(text).substr(eq + 1)));
  return std::pair{key, text.substr(eq + 1)};
}

std::vector<std::string> command_environment(const EnvList& sandbox_env, const EnvList& command_env) {
  EnvList merged = {
      {"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
      {"HOME", "/home/user"},
      {"USER", "user"},
      {"LOGNAME", "user"},
      {"SHELL", "/bin/bash"},
      {"LANG", "C.UTF-8"},
      {"TMPDIR", "/tmp"},
      // nsbox_helpers for every Python (docs/tools.md); a PYTHONPATH of the user's replaces it.
      {"PYTHONPATH", "/opt/nsbox/python"},
  };
  auto set = [&](const std::string& k, const std::string& v) {
    for (auto& [mk, mv] : merged)
      if (mk == k) { mv = v; return; }
    merged.emplace_back(k, v);
  };
  for (const auto& [k, v] : sandbox_env) set(k, v);
  for (const auto& [k, v] : command_env) set(k, v);
  std::vector<std::string> out;
  for (const auto& [k, v] : merged) out.push_back(k + "=" + v);
  return out;
}

std::vector<std::string> kernel_zygote_environment() {
  return command_environment(PackageSources{}.environment(), {});
}

std::string differs_from_kernel_zygote(const std::vector<std::string>& kernel_env) {
  auto read_at_start = [](const std::vector<std::string>& env) {
    std::vector<std::string> out;
    for (const auto& entry : env)
      if (env_read_at_process_start(std::string_view(entry).substr(0, entry.find('=')))) out.push_back(entry);
    std::sort(out.begin(), out.end());
    return out;
  };
  auto mine = read_at_start(kernel_env), zygote = read_at_start(kernel_zygote_environment());
  std::vector<std::string> differ;
  std::set_symmetric_difference(mine.begin(), mine.end(), zygote.begin(), zygote.end(), std::back_inserter(differ));
  return differ.empty() ? "" : differ.front().substr(0, differ.front().find('='));
}

protocol::Json CommandResult::to_json() const {
  if (raw.is_object() && !raw.empty()) return raw;
  protocol::Json j = {{"status", status}, {"reason", reason}, {"exit_code", exit_code}, {"duration_ms", duration_ms}};
  j["signal"] = signal ? protocol::Json(*signal) : protocol::Json(nullptr);
  if (!message.empty()) j["message"] = message;
  return j;
}

CommandResult CommandResult::from_json(const protocol::Json& j) {
  CommandResult r;
  r.status = j.value("status", "error");
  r.reason = j.value("reason", "");
  r.exit_code = j.value("exit_code", 1);
  if (auto s = j.find("signal"); s != j.end() && s->is_number_integer()) r.signal = s->get<int>();
  r.message = j.value("message", "");
  r.duration_ms = j.value("duration_ms", uint64_t{0});
  r.raw = j;
  return r;
}

CommandResult classify(const CommandEnd& end, const std::string& program, const Limits& limits,
                       std::string_view size_name, double timeout_s) {
  CommandResult r;
  if (end.spawn_errno) {
    r.status = "error";
    bool missing = *end.spawn_errno == ENOENT;
    r.reason = missing ? "not_found" : "not_executable";
    r.exit_code = missing ? 127 : 126;
    r.message = missing ? "command not found in the sandbox: " + program
                        : "cannot execute " + program + ": " + std::strerror(*end.spawn_errno);
    return r;
  }
  r.signal = end.signal;
  r.exit_code = end.signal ? 128 + *end.signal : end.exit_code.value_or(0);
  if (end.timed_out) {
    r.status = "timeout";
    r.reason = "deadline";
    r.exit_code = 124;
    char secs[32];
    std::snprintf(secs, sizeof secs, "%g", timeout_s);
    r.message = std::string("timed out after ") + secs + " s; its process group was killed";
    return r;
  }
  if (end.signal) {
    r.status = "killed";
    if (end.signal == SIGKILL && end.oom_killed) {
      r.reason = "oom";
      r.message = "killed by the OOM killer: the sandbox's memory limit is " + format_bytes(limits.memory_bytes) +
                  " (size " + std::string(size_name) + ")";
    } else if (!end.seccomp_kills.empty()) {
      r.reason = "seccomp";
      r.message = "killed by the seccomp filter: " + end.seccomp_kills.front();
    } else {
      r.reason = "signal";
      r.message = "killed by " + sys::describe_signal(*end.signal);
    }
    return r;
  }
  r.status = r.exit_code == 0 ? "ok" : "error";
  r.reason = r.exit_code == 0 ? "" : "exit";
  return r;
}

}  // namespace nsbox
