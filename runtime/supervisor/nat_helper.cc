#include "runtime/supervisor/nat_helper.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <sched.h>
#include <unistd.h>

#include "isolation/namespace_child.h"
#include "isolation/sys/files.h"
#include "isolation/sys/log.h"
#include "runtime/core/address_class.h"

namespace nsbox {
namespace {

constexpr const char* kNft = "/usr/sbin/nft";
constexpr const char* kSlirp = "/usr/bin/slirp4netns";
constexpr int kNftTimeoutMs = 10000;

Error missing(const char* program, const char* package) {
  return make_error(ErrorCode::kUnsupported, std::string("--net internet needs ") + program + ", which is not installed",
                    std::string("apt-get install ") + package + " (scripts/install-deps installs it)");
}

// `nft -f -` in the sandbox's user and network namespaces, the rules on its stdin.
Result<void> apply_rules(pid_t init_pid) {
  auto ns = NSBOX_TRY(namespace_child::open_namespaces(init_pid, {"user", "net"}));
  int in[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) return fail(sys_error("pipe2"));
  UniqueFd in_r(in[0]), in_w(in[1]), err_r(err[0]), err_w(err[1]);
  auto nft = NSBOX_TRY(HelperProcess::start({kNft,
                                             {"nft", "-f", "-"},
                                             {in_r.get(), -1, err_w.get()},
                                             helper_environment(),
                                             "nft (the sandbox's egress rules)",
                                             {{ns[0].get(), CLONE_NEWUSER}, {ns[1].get(), CLONE_NEWNET}},
                                             {CAP_NET_ADMIN}}));
  in_r.reset();
  err_w.reset();
  std::string rules = NatHelper::ruleset();
  (void)send_config(std::move(in_w), rules, "nft");
  // Its stderr ends when it does; whatever it said there is the reason it failed.
  std::string errors = read_report(err_r.get(), kNftTimeoutMs, "nft").value_or("");
  std::string how;
  for (int i = 0; i < kNftTimeoutMs / 10 && how.empty(); ++i) {
    how = nft.reap();
    if (how.empty()) ::usleep(10000);
  }
  if (how != "exited with status 0")
    return fail(make_error(ErrorCode::kSystem, "nft " + (how.empty() ? std::string("did not finish") : how) +
                                                   " applying the sandbox's egress rules: " + errors.substr(0, 500)));
  return {};
}

}  // namespace

std::string NatHelper::ruleset() {
  std::string blocked;
  for (const auto& r : net::kBlockedV4) blocked += (blocked.empty() ? "" : ", ") + net::v4_range_text(r);
  return "table inet nsbox_egress {\n"
         "  chain output {\n"
         "    type filter hook output priority 0; policy accept;\n"
         "    oif \"lo\" accept\n"
         "    ip daddr 10.0.2.3 udp dport 53 accept\n"
         "    ip daddr 10.0.2.3 tcp dport 53 accept\n"
         "    ip daddr { " + blocked + " } reject with icmpx type admin-prohibited\n"
         "    meta nfproto ipv6 reject with icmpx type admin-prohibited\n"
         "  }\n"
         "}\n";
}

Result<NatHelper> NatHelper::start(const NatSetup& setup) {
  if (::access(kNft, X_OK) != 0) return fail(missing("nft", "nftables"));
  if (::access(kSlirp, X_OK) != 0) return fail(missing("slirp4netns", "slirp4netns"));
  if (::access("/dev/net/tun", F_OK) != 0)
    return fail(make_error(ErrorCode::kUnsupported, "--net internet needs /dev/net/tun, which this host does not have",
                           "modprobe tun (the NAT helper makes the sandbox's tap device through it)"));
  NSBOX_CHECK_CTX(apply_rules(setup.init_pid), "--net internet");

  std::string proc = "/proc/" + std::to_string(setup.init_pid) + "/ns/";
  std::vector<std::string> argv = {"slirp4netns", "--configure", "--mtu=65520", "--disable-host-loopback",
                                   "--enable-seccomp", "--ready-fd=3", "--userns-path=" + proc + "user",
                                   "--netns-type=path"};
  if (::geteuid() == 0) argv.push_back("--enable-sandbox");  // its own mount namespace, capabilities dropped
  argv.push_back(proc + "net");
  argv.push_back("tap0");
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return fail(sys_error("pipe2"));
  UniqueFd ready_r(ready[0]), ready_w(ready[1]);
  UniqueFd helper_netns;
  std::vector<std::pair<int, int>> join;
  if (!setup.helper_netns.empty()) {
    helper_netns.reset(::open(setup.helper_netns.c_str(), O_RDONLY | O_CLOEXEC));
    if (!helper_netns) return fail(sys_error("open " + setup.helper_netns));
    join.emplace_back(helper_netns.get(), CLONE_NEWNET);
  }
  NatHelper nat;
  nat.process_ = NSBOX_TRY(HelperProcess::start(
      {kSlirp, argv, {-1, -1, STDERR_FILENO, ready_w.get()}, helper_environment(), "the NAT helper (slirp4netns)", join}));
  ready_w.reset();
  auto line = read_report(ready_r.get(), kReadyMs, "the NAT helper (slirp4netns)");
  if (!line) return fail(std::move(line.error()));
  if (line->empty())
    return fail(make_error(ErrorCode::kSystem,
                           "the NAT helper (slirp4netns) exited before the network was up (see the supervisor log)"));
  log::info("started the NAT helper (slirp4netns, pid " + std::to_string(nat.process_.pid()) + ")");
  return nat;
}

void NatHelper::on_exit() {
  if (std::string how = process_.reap(); !how.empty())
    log::error("the NAT helper (slirp4netns) " + how + "; the sandbox has no way out until it is recreated");
}

}  // namespace nsbox
