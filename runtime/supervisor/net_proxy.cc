#include "runtime/supervisor/net_proxy.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <utility>
#include <vector>

#include "isolation/network.h"
#include "isolation/sys/files.h"
#include "isolation/sys/log.h"
#include "runtime/protocol/frame.h"

namespace nsbox {

using protocol::Json;

Result<NetProxy> NetProxy::start(const NetProxySetup& setup) {
  const std::string what = "the egress proxy";
  UniqueFd listener = NSBOX_TRY(network::listen_inside(setup.init_pid, net::kProxyPort));
  int control_pipe[2], report_pipe[2];
  if (::pipe2(control_pipe, O_CLOEXEC) != 0) return fail(sys_error("pipe2").context(what));
  UniqueFd control_r(control_pipe[0]), control_w(control_pipe[1]);
  if (::pipe2(report_pipe, O_CLOEXEC) != 0) return fail(sys_error("pipe2").context(what));
  UniqueFd report_r(report_pipe[0]), report_w(report_pipe[1]);
  UniqueFd helper_netns;
  std::vector<std::pair<int, int>> join;
  if (!setup.helper_netns.empty()) {
    helper_netns.reset(::open(setup.helper_netns.c_str(), O_RDONLY | O_CLOEXEC));
    if (!helper_netns) return fail(sys_error("open " + setup.helper_netns).context(what));
    join.emplace_back(helper_netns.get(), CLONE_NEWNET);
  }
  NetProxy proxy;
  // stdin: the config, then allowlists; stderr: our log; fd 3: the socket; fd 4: the report.
  proxy.process_ = NSBOX_TRY(HelperProcess::start({setup.program, {"nsbox-netproxy"},
                                                   {control_r.get(), -1, STDERR_FILENO, listener.get(), report_w.get()},
                                                   helper_environment(), what, join}));
  control_r.reset();
  report_w.reset();
  Json config = {{"sandbox_id", setup.sandbox_id}, {"allow", setup.allow.to_json()}, {"denial_log", setup.denial_log},
                 {"resolve", setup.resolve_override}};
  NSBOX_CHECK(files::write_all(control_w.get(), config.dump() + "\n", "the egress proxy's stdin"));
  std::string line = NSBOX_TRY(read_report(report_r.get(), kReadyMs, what));
  Json answer = Json::parse(line, nullptr, false);
  if (!answer.is_object() || !answer.value("ok", false))
    return fail(make_error(ErrorCode::kInternal, what + " did not start: " +
                                                     (answer.is_object() ? answer.value("error", line) : "see the supervisor log")));
  proxy.control_ = std::move(control_w);
  log::info("started the egress proxy (pid " + std::to_string(proxy.process_.pid()) + "), allowing " + setup.allow.describe());
  return proxy;
}

Result<void> NetProxy::set_allow(const net::AllowList& allow) {
  if (!control_ || !process_.running())
    return fail(make_error(ErrorCode::kUnavailable, "the sandbox's egress proxy is not running (see its supervisor log)"));
  return files::write_all(control_.get(), allow.to_json().dump() + "\n", "the egress proxy's stdin");
}

void NetProxy::on_exit() {
  if (std::string how = process_.reap(); !how.empty())
    log::error("the egress proxy " + how + "; the sandbox has no way out until it is recreated");
  control_.reset();
}

void NetProxy::stop() {
  control_.reset();  // EOF: it exits on its own
  process_.stop(500);
}

}  // namespace nsbox
