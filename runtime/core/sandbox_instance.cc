#include "runtime/core/sandbox_instance.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "isolation/launcher.h"
#include "isolation/seccomp_policy.h"
#include "isolation/sys/syscall.h"
#include "runtime/protocol/frame.h"

namespace nsbox {
namespace {

constexpr int kReadyTimeoutMs = 10000;

// Waits (bounded) for init's first message.
Result<void> await_ready(int control_fd, int pidfd) {
  pollfd p[2] = {{control_fd, POLLIN, 0}, {pidfd, POLLIN, 0}};
  int n = sys::retry_eintr([&] { return ::poll(p, 2, kReadyTimeoutMs); });
  if (n == 0) return fail(make_error(ErrorCode::kTimeout, "the sandbox's init did not report ready within 10 s"));
  if (n < 0) return fail(sys_error("poll for the sandbox's init"));
  if (!(p[0].revents & POLLIN)) return fail(make_error(ErrorCode::kInternal, "the sandbox's init exited at start"));
  auto frame = NSBOX_TRY(protocol::recv_frame(control_fd, protocol::kMaxInitFrame));
  if (!frame || frame->message.value("event", "") != "ready")
    return fail(make_error(ErrorCode::kInternal, "the sandbox's init sent no ready message"));
  return {};
}

}  // namespace

Result<std::unique_ptr<SandboxInstance>> SandboxInstance::start(const InstanceOptions& options) {
  std::unique_ptr<SandboxInstance> self(new SandboxInstance());
  self->size_ = options.size;
  const Limits limits = limits_for(options.size);

  auto driver = cgroup::for_new_sandbox(options.id);
  if (driver) {
    self->cgroup_ = std::move(*driver);
    NSBOX_CHECK_CTX(self->cgroup_->create(), "create cgroup");
    NSBOX_CHECK_CTX(self->cgroup_->apply(limits), "set sandbox limits");
  } else if (driver.error().code == ErrorCode::kUnsupported || driver.error().code == ErrorCode::kPermissionDenied) {
    self->fallback_reason_ = driver.error().message;
    if (!driver.error().hint.empty()) self->fallback_reason_ += " (" + driver.error().hint + ")";
  } else {
    return fail(std::move(driver.error()).context("choose a cgroup for the sandbox"));
  }

  auto program = NSBOX_TRY(seccomp::compile_cached(options.cache_dir));
  UniqueFd ours, theirs;
  if (!options.command) {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return fail(sys_error("socketpair for init"));
    ours.reset(pair[0]);
    theirs.reset(pair[1]);
  }

  launcher::Spec spec;
  spec.rootfs.limits = limits;
  spec.rootfs.files_volume = options.files_dir;
  spec.rootfs.home_volume = options.home_dir;
  spec.rootfs.workspace_root = options.workspace_root;
  spec.rootfs.files_attached_later = options.files_attached_later;
  spec.rootfs.mount_points = options.mount_points;
  spec.rootfs.sandbox_libexec = options.sandbox_libexec;
  spec.rootfs.bridge_dir = options.bridge_dir;
  spec.rootfs.wheelhouse = options.wheelhouse;
  spec.rootfs.passwd_extra = options.accounts.passwd_lines();
  spec.rootfs.group_extra = options.accounts.group_lines();
  spec.rootfs.accounts = !options.accounts.empty();
  for (const auto& u : options.accounts.users) spec.rootfs.account_homes.push_back({SandboxAccounts::home_of(u.name), u.uid});
  const std::string& root = options.workspace_root;
  spec.rootfs.shared_workspace = spec.rootfs.accounts && root != rootfs::kHome && !root.starts_with(std::string(rootfs::kHome) + "/");
  spec.extra_ids = {options.accounts.uids(), options.accounts.gids()};
  spec.rootfs.image_tree = options.image_tree;
  if (options.net == network::Mode::kInternet) spec.rootfs.resolv_conf = "nameserver 10.0.2.3\n";  // slirp4netns's forwarder
  if (self->cgroup_) spec.rootfs.cgroup_views = self->cgroup_->views();
  spec.net = options.net;
  spec.limits = limits;
  spec.cgroup = self->cgroup_.get();
  spec.seccomp = &program;
  spec.init_argv = {"nsbox-init"};
  spec.init_env = {"PATH=/usr/bin:/bin"};
  spec.control_fd = theirs.get();
  spec.command = options.command;
  spec.while_building = options.while_building;
  auto launched = NSBOX_TRY(launcher::launch(spec));
  self->init_pid_ = launched.init_pid;
  self->pidfd_ = std::move(launched.pidfd);
  self->listener_ = std::move(launched.seccomp_listener);
  self->reports_ = std::move(launched.reports);
  self->control_ = std::move(ours);
  if (!options.command) NSBOX_CHECK(await_ready(self->control_.get(), self->pidfd_.get()));
  return self;
}

SandboxInstance::~SandboxInstance() { (void)destroy(); }

Enforcement SandboxInstance::enforcement() const {
  if (!cgroup_) return Enforcement::kRlimits;
  return cgroup_->placement().driver == "v2" ? Enforcement::kCgroupV2 : Enforcement::kCgroupV1;
}

cgroup::Placement SandboxInstance::placement() const { return cgroup_ ? cgroup_->placement() : cgroup::Placement{}; }

Result<void> SandboxInstance::set_cpu_weight(unsigned weight) {
  if (!cgroup_) return {};
  return cgroup_->set_cpu_weight(weight);
}

Result<std::vector<UniqueFd>> SandboxInstance::cgroup_join_files() const {
  if (!cgroup_) return fail(make_error(ErrorCode::kUnsupported, "the sandbox has no cgroup (" + fallback_reason_ + ")"));
  auto join = NSBOX_TRY(cgroup_->open_join());
  std::vector<UniqueFd> files = std::move(join.self_tasks);
  if (join.clone_into) {
    UniqueFd procs(::openat(join.clone_into.get(), "cgroup.procs", O_WRONLY | O_CLOEXEC));
    if (!procs) return fail(sys_error("open the sandbox's cgroup.procs"));
    files.push_back(std::move(procs));
  }
  return files;
}

Result<void> SandboxInstance::resize(SizeTier size) {
  const Limits next = limits_for(size);
  if (cgroup_) {
    // Refused before anything is written: on cgroup v2 a memory.max below the usage makes
    // the kernel reclaim and then OOM-kill (tmpfs pages cannot be reclaimed, so it would
    // kill everything, init too); v1 would answer EBUSY.
    if (auto used = cgroup_->memory_usage(); used && *used > next.memory_bytes)
      return fail(make_error(ErrorCode::kLimitExceeded,
                             "resize to " + std::string(size_tier_name(size)) + ": the sandbox uses " +
                                 std::to_string(*used >> 20) + " MiB, more than the " + format_bytes(next.memory_bytes) +
                                 " of " + std::string(size_tier_name(size)),
                             "free memory first (files in /tmp and /dev/shm count)"));
    if (auto r = cgroup_->apply(next); !r) {
      Error e = r.error();
      (void)cgroup_->apply(limits_for(size_));
      if (auto used = cgroup_->memory_usage(); used && *used > next.memory_bytes)
        e.hint = "the sandbox uses " + std::to_string(*used >> 20) + " MiB, more than the " +
                 format_bytes(next.memory_bytes) + " of " + std::string(size_tier_name(size)) + "; free memory first";
      return fail(std::move(e).context("resize to " + std::string(size_tier_name(size))));
    }
  } else {
    // New processes inherit init's rlimits; running ones keep theirs.
    rlimit as{next.memory_bytes, next.memory_bytes}, nproc{next.pids, next.pids};
    if (::prlimit(init_pid_, RLIMIT_AS, &as, nullptr) != 0 || ::prlimit(init_pid_, RLIMIT_NPROC, &nproc, nullptr) != 0)
      return fail(sys_error("prlimit on the sandbox's init").context("resize to " + std::string(size_tier_name(size))));
  }
  size_ = size;
  return {};
}

uint64_t SandboxInstance::oom_kills() const {
  if (!cgroup_) return 0;
  auto n = cgroup_->oom_kills();
  return n ? *n : 0;
}

std::optional<uint64_t> SandboxInstance::memory_usage() const {
  if (!cgroup_) return std::nullopt;
  auto used = cgroup_->memory_usage();
  return used ? std::optional<uint64_t>(*used) : std::nullopt;
}

Result<void> SandboxInstance::destroy() {
  if (init_pid_ > 0) {
    // SIGKILL to a pid namespace's init kills every process in it.
    if (pidfd_) ::syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0);
    else ::kill(init_pid_, SIGKILL);
    pollfd p{pidfd_.get(), POLLIN, 0};
    if (pidfd_) (void)sys::retry_eintr([&] { return ::poll(&p, 1, 5000); });
    ::waitpid(init_pid_, nullptr, pidfd_ ? WNOHANG : 0);
    init_pid_ = -1;
  }
  control_.reset();
  reports_.reset();
  listener_.reset();
  pidfd_.reset();
  if (cgroup_) {
    auto r = cgroup_->destroy();
    cgroup_.reset();
    return r;
  }
  return {};
}

}  // namespace nsbox
