// What the nsbox command (or an embedder) hands a new supervisor on its stdin: the
// sandbox to build. Part of the protocol between the client library and the supervisor,
// so the client builds it without compiling or linking any supervisor code.
//
// Never written to disk: env values and the mounts' credentials may be secrets.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "isolation/size_tier.h"
#include "mounts/bucket/mount_spec.h"
#include "runtime/command.h"
#include "runtime/net/net_policy.h"
#include "runtime/packages/package_sources.h"
#include "runtime/protocol/frame.h"
#include "runtime/tools/tools_config.h"

namespace nsbox {

struct SupervisorSpec {
  std::string id;
  std::string name;
  SizeTier size = SizeTier::kStandard;
  net::NetPolicy net;
  // Names the egress proxy answers without DNS: tests only (NSBOX_TEST_RESOLVE in the
  // creating process's environment), to reach their own servers on loopback by a name.
  std::map<std::string, std::string> net_resolve;
  // `--net internet`'s NAT helper runs in this network namespace: tests only
  // (NSBOX_TEST_NAT_NETNS), so that nothing the sandbox sends can leave the machine.
  std::string nat_netns;
  PackageSources packages;
  EnvList env;
  std::string volume;  // the files volume's name (made by the caller)
  std::string home;    // the home volume's name (made by the caller); empty: a tmpfs
  std::string created_at;  // a restarted sandbox keeps its own; empty: now
  std::vector<bucket::MountRequest> mounts;  // with their credentials (wiped once the servers have them)
  ToolsConfig tools;
  ToolKeys tool_keys;  // handed to the tool bridge when it starts; never saved
  std::vector<std::string> ephemeral;  // manifest paths under /home/user a snapshot leaves out
  std::string manifest_digest;  // the manifest's, credentials aside (runtime/create_options.h)
  std::string pool;  // a warm pool's member: its server; it waits at the least CPU weight until claimed
  std::string create_path = "cold";  // kept by a start: how the sandbox was made
  std::vector<std::string> preload;  // imported by every kernel before its first cell
  bool memory_merge = false;          // the kernels' preloaded heap offered to KSM
  bool lazy_kernel = false;           // no kernel until the first cell (commands-only use)
  // `serve --kernel-zygote`: the zygote's socket, where its kernels come from when they
  // can (docs/kernel-zygote.md); the Runtime's (Runtime::use_kernel_zygote), never saved.
  std::string kernel_zygote;

  protocol::Json to_json() const;
  static Result<SupervisorSpec> from_json(const protocol::Json& j);
};

// How long a bucket mount's server may take to report (its check of the remote, then
// its mount): the supervisor waits this long for each, and the client for all of them. A
// remote that never answers costs the check three attempts of HttpLimits' bounds (under
// 40 s), which this must outlast.
constexpr int kBucketServerReadyMs = 60000;
constexpr int kHelperMountTimeoutMs = 30000;  // rclone or s3fs mounting, after the check

// The most a supervisor's start may take for these mounts, on top of the sandbox's own:
// they start one after another.
int mounts_start_bound_ms(const std::vector<bucket::MountRequest>& mounts);

}  // namespace nsbox
