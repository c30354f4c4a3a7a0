// serve: the HTTP API. The server is its own program (libexec/nsbox/nsbox-server,
// docs/decisions.md): `nsbox serve` execs it, so the pid that prints the ready line and
// gets SIGTERM is the server's. drain: that SIGTERM, sent by the server's pid file, and
// the wait for the server to end (a sharded server drains first: docs/semantics.md).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/context.h"
#include "isolation/sys/files.h"
#include "runtime/install_layout.h"

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
  auto root = StateRoot::resolve(inv.root);
  if (!root) return ctx->out.error(root.error());
  std::string pid_file = root->data_dir + "/api/server.pid";
  auto text = files::read_file(pid_file, 64);
  if (!text)
    return ctx->out.error(make_error(ErrorCode::kNotFound, "no nsbox serve runs on this root (" + pid_file + " is missing)"));
  char* end = nullptr;
  long pid = std::strtol(text->c_str(), &end, 10);
  // Only a server: a pid file left by one that was killed may name another process now.
  auto comm = files::read_file("/proc/" + std::to_string(pid) + "/comm", 64);
  if (pid <= 1 || !end || *end != '\n' || !comm || *comm != "nsbox-server\n")
    return ctx->out.error(make_error(ErrorCode::kNotFound, "no nsbox serve runs on this root (" + pid_file + " names pid " +
                                                               std::to_string(pid) + ", which is not nsbox-server)"));
  if (::kill(static_cast<pid_t>(pid), SIGTERM) != 0) return ctx->out.error(sys_error("kill " + std::to_string(pid)));
  ctx->out.note("nsbox drain: sent SIGTERM to nsbox-server " + std::to_string(pid) + "; waiting for it to end");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
  // Ended: gone, or a zombie its parent has not reaped yet.
  auto running = [&] {
    auto stat = files::read_file("/proc/" + std::to_string(pid) + "/stat", 4096);
    if (!stat) return false;
    auto close = stat->rfind(')');
    return close != std::string::npos && close + 2 < stat->size() && (*stat)[close + 2] != 'Z';
  };
  while (running()) {
    if (std::chrono::steady_clock::now() > deadline)
      return ctx->out.error(make_error(ErrorCode::kTimeout, "nsbox-server " + std::to_string(pid) + " still runs after " +
                                                                std::to_string(int(timeout)) + " s",
                                       "its log says what the drain waits for"));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (ctx->out.json) ctx->out.document({{"stopped", true}, {"pid", pid}});
  else ctx->out.line("nsbox-server " + std::to_string(pid) + " has ended");
  return 0;
}

}  // namespace nsbox::cli
