// serve: the HTTP API. The server is its own program (libexec/nsbox/nsbox-server,
// docs/design.md, "Server"): `nsbox serve` execs it, so the pid that prints the ready line and
// gets SIGTERM is the server's. drain: that SIGTERM, sent by the server's pid file, and
// the wait for the server to end (a sharded server drains first: docs/semantics.md).
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/context.h"
#include "isolation/sys/files.h"
#include "isolation/sys/unique_fd.h"
#include "runtime/core/install_layout.h"

namespace nsbox::cli {

int cmd_serve(const Invocation& inv) {
  Output out{inv.json};
  auto layout = InstallLayout::discover();
  if (!layout) return out.error(layout.error());
  std::string server = layout->api_server();
  std::vector<std::string> args = {"nsbox-server"};
  if (inv.root) args.insert(args.end(), {"--root", *inv.root});
  args.insert(args.end(), inv.args.begin(), inv.args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(server.c_str(), argv.data());
  return out.error(sys_error("start " + server).with_hint("reinstall nsbox: its HTTP server is missing"));
}

namespace {

// The server the root's pid file names, as a pidfd (no pid reuse between the check and
// the signal): the file must be ours and not writable by others, the process must run
// the nsbox-server program.
Result<UniqueFd> open_server(const std::string& pid_file) {
  auto none = [&](const std::string& why) {
    return make_error(ErrorCode::kNotFound, "no nsbox serve runs on this root: " + why);
  };
  struct stat st{};
  if (::stat(pid_file.c_str(), &st) != 0) return fail(none(pid_file + " is missing"));
  if (st.st_uid != ::geteuid() || (st.st_mode & 022))
    return fail(make_error(ErrorCode::kPermissionDenied, pid_file + " is not this user's own file (or others may write it)"));
  auto text = NSBOX_TRY(files::read_file(pid_file, 64));
  char* end = nullptr;
  long pid = std::strtol(text.c_str(), &end, 10);
  if (pid <= 1 || !end || *end != '\n') return fail(none(pid_file + " holds no pid"));
  UniqueFd fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!fd) return fail(none("pid " + std::to_string(pid) + " (from " + pid_file + ") is gone"));
  char exe[PATH_MAX] = {};
  ssize_t n = ::readlink(("/proc/" + std::to_string(pid) + "/exe").c_str(), exe, sizeof exe - 1);
  std::string program(exe, n > 0 ? static_cast<size_t>(n) : 0);
  if (!program.ends_with("/nsbox-server")) return fail(none("pid " + std::to_string(pid) + " runs " + (program.empty() ? "another program" : program)));
  return fd;
}

}  // namespace

int cmd_drain(const Invocation& inv) {
  int code = 0;
  auto ctx = prepare(inv, code, /*open_runtime=*/false);
  if (!ctx) return code;
  double timeout = 3600;
  if (ctx->args.values.count("timeout")) {
    auto t = timeout_flag(ctx->args);
    if (!t) return ctx->out.error(t.error());
    timeout = *t;
  }
  // --root before or after the command's name.
  auto root = StateRoot::resolve(ctx->args.values.count("root") ? std::optional<std::string>(ctx->args.value("root")) : inv.root);
  if (!root) return ctx->out.error(root.error());
  const std::string api_dir = root->data_dir + "/api";
  auto server = open_server(api_dir + "/server.pid");
  if (!server) return ctx->out.error(server.error());
  const std::string result_file = api_dir + "/drain.json";
  ::unlink(result_file.c_str());  // the one the server writes now is this drain's
  if (::syscall(SYS_pidfd_send_signal, server->get(), SIGTERM, nullptr, 0) != 0) return ctx->out.error(sys_error("signal nsbox-server"));
  ctx->out.note("nsbox drain: sent SIGTERM to nsbox-server; waiting for it to end");
  // The pidfd is readable once the process has ended (a zombie too).
  pollfd ended{server->get(), POLLIN, 0};
  int waited = ::poll(&ended, 1, static_cast<int>(std::min(timeout, 86400.0) * 1000));
  if (waited == 0)
    return ctx->out.error(make_error(ErrorCode::kTimeout, "nsbox-server still runs after " + std::to_string(int(timeout)) + " s",
                                     "its log says what the drain waits for"));
  if (waited < 0) return ctx->out.error(sys_error("poll the server's pidfd"));
  // A sharded server says what its drain did; one that kept sandboxes here failed.
  nlohmann::json result = nlohmann::json::object();
  if (auto text = files::read_file(result_file, 4096)) result = nlohmann::json::parse(*text, nullptr, false);
  if (!result.is_object()) result = nlohmann::json::object();
  uint64_t kept = result.value("kept", uint64_t{0});
  if (kept > 0)
    return ctx->out.error(make_error(ErrorCode::kSystem, "the drain kept " + std::to_string(kept) + " sandboxes here (their snapshot failed)",
                                     "the server's log names them; they still run on this machine"));
  if (ctx->out.json) ctx->out.document({{"stopped", true}, {"moved", result.value("moved", uint64_t{0})}});
  else ctx->out.line("nsbox-server has ended" + (result.contains("moved") ? "; " + std::to_string(result.value("moved", uint64_t{0})) + " sandboxes moved to snapshots" : std::string()));
  return 0;
}

}  // namespace nsbox::cli
