// One running sandbox, seen from the host: its cgroup, its init, the control channel to
// init and the seccomp listener. The supervisor owns one for a sandbox's whole life; a
// one-shot `nsbox run` owns one for a single command. Destroying it (or its destructor)
// kills everything in the sandbox and removes the cgroup.
#pragma once

#include <sys/types.h>

#include <memory>
#include <functional>
#include <optional>
#include <string>

#include "isolation/cgroup.h"
#include "isolation/command_pid1.h"
#include "isolation/network.h"
#include "isolation/seccomp_violation.h"
#include "isolation/size_tier.h"
#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"
#include "runtime/core/sandbox_accounts.h"
#include "runtime/core/state_store.h"

namespace nsbox {

struct InstanceOptions {
  std::string id;
  SizeTier size = SizeTier::kStandard;
  network::Mode net = network::Mode::kNone;
  std::string files_dir;        // bound at /mnt/files
  bool files_attached_later = false;  // an image volume, mounted and attached after start
  std::vector<std::string> mount_points;  // where bucket mounts will be attached
  std::string sandbox_libexec;  // bound at /opt/nsbox
  std::string cache_dir;        // compiled seccomp program
  std::string bridge_dir;       // bound at /run/nsbox (the tool bridge's socket); empty: none
  std::string wheelhouse;       // bound at /opt/wheelhouse (pip's offline source); empty: none
  // One-shot: pid 1 runs this command itself (no init, no control channel); its
  // command_pid1::Report structs arrive on reports_fd().
  std::optional<command_pid1::Command> command;
  std::string home_dir;  // bound at /home/user; empty: a tmpfs (one-shot)
  std::function<void()> while_building;  // launcher::Spec's
  std::string workspace_root = kDefaultWorkspaceRoot;  // rootfs::Spec's
  SandboxAccounts accounts = {};  // besides `user`: mapped, named in /etc, able to run commands
  std::string image_tree = {};  // an image's merged tree as the root (rootfs::Spec's); empty: the host's system
};

class SandboxInstance {
 public:
  static Result<std::unique_ptr<SandboxInstance>> start(const InstanceOptions& options);
  ~SandboxInstance();

  int control_fd() const { return control_.get(); }
  int reports_fd() const { return reports_.get(); }
  int seccomp_listener_fd() const { return listener_.get(); }
  int pidfd() const { return pidfd_.get(); }
  pid_t init_pid() const { return init_pid_; }

  SizeTier size() const { return size_; }
  Limits limits() const { return limits_for(size_); }
  Enforcement enforcement() const;
  // Why limits fall back to rlimits (no usable cgroup); empty when a cgroup is used.
  const std::string& fallback_reason() const { return fallback_reason_; }
  cgroup::Placement placement() const;

  // Changes the limits of the running sandbox; on failure the old limits stay.
  Result<void> resize(SizeTier size);
  // The sandbox's share of contended CPU (isolation/cgroup.h); nothing without a cgroup.
  Result<void> set_cpu_weight(unsigned weight);
  // OOM kills in the sandbox so far (0 when limits are rlimits).
  uint64_t oom_kills() const;
  std::optional<uint64_t> memory_usage() const;

  Result<seccomp::Violation> take_seccomp_violation() { return seccomp::take_violation(listener_.get()); }
  // The files a process outside writes "0" to, to join the sandbox's cgroup (v1 each
  // hierarchy's `tasks`, v2 `cgroup.procs`), open for writing: a kernel from the zygote
  // joins by them. An error when the limits are rlimits (no cgroup to join).
  Result<std::vector<UniqueFd>> cgroup_join_files() const;

  // Idempotent. Kills init (and with it the pid namespace), reaps it, removes the cgroup.
  Result<void> destroy();

 private:
  SandboxInstance() = default;

  SizeTier size_ = SizeTier::kStandard;
  std::unique_ptr<cgroup::Driver> cgroup_;
  std::string fallback_reason_;
  pid_t init_pid_ = -1;
  UniqueFd pidfd_;
  UniqueFd control_;
  UniqueFd listener_;
  UniqueFd reports_;
};

}  // namespace nsbox
