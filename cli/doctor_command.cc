// doctor: what this host can do, and the fix for what it cannot.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/context.h"
#include "isolation/subordinate_ids.h"
#include "isolation/userns.h"
#include "isolation/preflight.h"
#include "isolation/sys/unique_fd.h"
#include "kernel/zygote_keeper/kernel_zygote_process.h"
#include "mounts/bucket/external_helpers.h"
#include "mounts/volume_image.h"
#include "runtime/core/install_layout.h"

namespace nsbox::cli {

namespace {

// Files volumes are bounded (an ext4 image per volume) only where images work.
preflight::Check files_quota_check() {
  auto available = volume_image::available();
  if (available) return {"files quotas", preflight::Level::kOk, "enforced: each volume is an ext4 image on a loop device", ""};
  std::string fix = available.error().hint.empty() ? "run nsbox as root for quotas" : available.error().hint;
  return {"files quotas", preflight::Level::kWarn,
          "not enforced (" + available.error().message + "): volumes are plain directories, bounded only by the host disk", fix};
}

// Bucket mounts: which of the strategies can serve them here (rootless: the built-in one,
// where /dev/fuse is open to the user).
preflight::Check bucket_mounts_check() {
  const std::string name = "bucket mounts";
  auto layout = InstallLayout::discover();
  if (!layout || ::access(layout->bucket_server().c_str(), X_OK) != 0)
    return {name, preflight::Level::kWarn, "the built-in server (nsbox-bucketfs) is missing from this installation",
            "reinstall nsbox (or build it: it needs libfuse3-dev, libcurl4-openssl-dev, libssl-dev, libexpat1-dev)"};
  if (::geteuid() != 0) {
    if (UniqueFd fuse(::open("/dev/fuse", O_RDWR | O_CLOEXEC)); !fuse)
      return {name, preflight::Level::kWarn, "not available: /dev/fuse is not open to this user",
              "chmod 0666 /dev/fuse (what udev does on Debian), or run nsbox as root"};
    return {name, preflight::Level::kOk, "strategies: builtin (rclone and s3fs need root: they mount through fusermount3)", ""};
  }
  std::string detail = "builtin";
  std::string missing;
  for (auto strategy : {bucket::MountStrategy::kRclone, bucket::MountStrategy::kS3fs}) {
    std::string tool(bucket::strategy_name(strategy));
    if (auto path = bucket::find_helper(strategy)) detail += ", " + tool + " (" + *path + ")";
    else missing += (missing.empty() ? "" : " ") + tool;
  }
  if (!missing.empty()) detail += "; strategies not installed: " + missing + " (apt-get install " + missing + ")";
  return {name, preflight::Level::kOk, "strategies: " + detail, ""};
}

// Network modes beyond none and host: the egress proxy ships with nsbox; `internet`
// needs slirp4netns and nft from the host.
preflight::Check network_modes_check() {
  const std::string name = "network modes";
  auto layout = InstallLayout::discover();
  std::string modes = "none, host";
  if (layout && ::access(layout->net_proxy().c_str(), X_OK) == 0) modes += ", allow=";
  std::string missing;
  for (auto [path, package] : {std::pair{"/usr/bin/slirp4netns", "slirp4netns"}, std::pair{"/usr/sbin/nft", "nftables"}})
    if (::access(path, X_OK) != 0) missing += (missing.empty() ? "" : " ") + std::string(package);
  if (!missing.empty())
    return {name, preflight::Level::kOk, modes + " (internet needs " + missing + ")", "apt-get install " + missing};
  struct stat tun{};
  if (::stat("/dev/net/tun", &tun) != 0 || !S_ISCHR(tun.st_mode))
    return {name, preflight::Level::kOk, modes + " (internet needs /dev/net/tun)", "modprobe tun"};
  return {name, preflight::Level::kOk, modes + ", internet", ""};
}

// /dev/net/tun: `--net internet`'s NAT helper makes the sandbox's tap device through it.
preflight::Check tun_check() {
  struct stat st{};
  if (::stat("/dev/net/tun", &st) != 0 || !S_ISCHR(st.st_mode))
    return {"/dev/net/tun", preflight::Level::kWarn, "missing: --net internet needs it", "modprobe tun (and tun in /etc/modules)"};
  return {"/dev/net/tun", preflight::Level::kOk, "present", ""};
}

// `nsbox serve` forks kernels from a zygote by default where this host allows it.
preflight::Check kernel_zygote_check() {
  auto usable = KernelZygoteProcess::usable();
  if (usable)
    return {"kernel zygote", preflight::Level::kOk, "nsbox serve forks kernels from a zygote (docs/kernel-zygote.md)", ""};
  return {"kernel zygote", preflight::Level::kWarn, "nsbox serve starts each kernel through its sandbox's init: " + usable.error().message,
          ::geteuid() != 0 ? "run nsbox serve as root" : "Linux 6.9 or later"};
}

// Accounts of a sandbox's own (--user, a manifest's users) map one host id each: as root,
// from the sandbox user's on; rootless, among the invoking user's subordinate ids, through
// newuidmap and newgidmap (Debian's uidmap).
preflight::Check accounts_check() {
  if (::geteuid() == 0) {
    auto ids = userns::host_ids();
    return {"accounts", preflight::Level::kOk,
            "--user and a manifest's users: each a host id of its own, from " + std::to_string(ids.uid + 1) + " up", ""};
  }
  auto grant = subids::own_grant();
  if (!grant)
    return {"accounts", preflight::Level::kWarn, "sandboxes are single-user here (" + grant.error().message + "): --user and a manifest's users need it, or nsbox run as root",
            grant.error().hint};
  return {"accounts", preflight::Level::kOk,
          "--user and a manifest's users: subordinate ids " + std::to_string(grant->uids.start) + " and up (" +
              std::to_string(grant->uids.count) + " uids, " + std::to_string(grant->gids.count) + " gids), mapped by newuidmap",
          ""};
}

}  // namespace

int cmd_doctor(const Invocation& inv) {
  int code = 0;
  auto ctx = prepare(inv, code, /*open_runtime=*/false);
  if (!ctx) return code;
  auto checks = preflight::run_all();
  checks.push_back(files_quota_check());
  checks.push_back(bucket_mounts_check());
  checks.push_back(network_modes_check());
  checks.push_back(tun_check());
  checks.push_back(kernel_zygote_check());
  checks.push_back(accounts_check());
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
