#include "runtime/supervisor/bucket_servers.h"

#include <fcntl.h>
#include <linux/mount.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "isolation/mount_injection.h"
#include "isolation/userns.h"
#include "isolation/sys/files.h"
#include "isolation/sys/log.h"
#include "mounts/bucket/staging_budget.h"
#include "runtime/core/sandbox_spec.h"
#include "runtime/supervisor/helper_mount.h"

namespace nsbox {
namespace {

using nlohmann::json;

// nsbox-bucketfs unmounts at SIGTERM in milliseconds; rclone may first try to finish an
// upload, which a stalled remote never lets it: past this it is killed.
constexpr int kTermGraceMs = 2000;
constexpr int kKillWaitMs = 1000;

// What the external tools may keep on the staging disk, as it is now.
void bound_tool_cache(bucket::HelperPaths& paths, const std::string& staging_dir) {
  struct statvfs st{};
  uint64_t total = 0, free = 0;
  if (::statvfs(staging_dir.c_str(), &st) == 0) {
    total = static_cast<uint64_t>(st.f_blocks) * st.f_frsize;
    free = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  }
  // rclone's and s3fs's caches are on the staging disk, like the builtin strategy's
  // staging files, and keep the same reserve free.
  paths.disk_reserve_bytes = bucket::staging_disk_reserve(total);
  paths.cache_max_bytes = free > paths.disk_reserve_bytes ? free - paths.disk_reserve_bytes : 0;
}

}  // namespace

Result<BucketServers> BucketServers::start(const std::vector<bucket::MountRequest>& requests, const BucketServerPaths& paths,
                                           pid_t init_pid, uid_t uid, gid_t gid) {
  BucketServers servers;
  if (requests.empty()) return servers;
  if (::geteuid() != 0) {
    for (const auto& r : requests)
      if (r.mount.strategy != bucket::MountStrategy::kBuiltin)
        return fail(make_error(ErrorCode::kUnsupported,
                               "mount " + r.mount.describe() + ": the " + std::string(bucket::strategy_name(r.mount.strategy)) +
                                   " strategy needs nsbox to run as root (it mounts through fusermount3, on the host)",
                               "use the builtin strategy rootless, or run nsbox as root"));
    // What the mount will do, tried first: a clear error rather than the helper's.
    UniqueFd fuse(::open("/dev/fuse", O_RDWR | O_CLOEXEC));
    if (!fuse)
      return fail(make_error(ErrorCode::kPermissionDenied,
                             "bucket mounts rootless need read and write access to /dev/fuse: " + std::string(std::strerror(errno)),
                             "chmod 0666 /dev/fuse (what udev does on Debian), or run nsbox as root"));
  }
  NSBOX_CHECK(files::ensure_private_dir(paths.mounts_dir));
  NSBOX_CHECK(files::ensure_private_dir(paths.staging_dir));
  for (size_t i = 0; i < requests.size(); ++i)
    NSBOX_CHECK(servers.start_one(requests[i], paths, i, init_pid, uid, gid));  // the destructor stops the rest
  return servers;
}

// nsbox-bucketfs with the mount's config on stdin: it checks the bucket, then serves it
// (or, with --probe, only checks). Its one-line report is the result.
Result<HelperProcess> BucketServers::run_bucketfs(const std::string& path, const json& config, bool probe_only,
                                                  const std::string& what, int fuse) {
  int config_pipe[2], report_pipe[2];
  if (::pipe2(config_pipe, O_CLOEXEC) != 0) return fail(sys_error("pipe2"));
  UniqueFd config_r(config_pipe[0]), config_w(config_pipe[1]);
  if (::pipe2(report_pipe, O_CLOEXEC) != 0) return fail(sys_error("pipe2"));
  UniqueFd report_r(report_pipe[0]), report_w(report_pipe[1]);
  // stdin: the config; stdout: nothing; stderr: the supervisor's log; fd 3: the report;
  // fd 4: the mounted /dev/fuse, when the supervisor made the mount.
  std::vector<int> fds = {config_r.get(), -1, STDERR_FILENO, report_w.get()};
  if (fuse >= 0) fds.push_back(fuse);
  std::vector<std::string> argv = {"nsbox-bucketfs"};
  if (probe_only) argv.push_back("--probe");
  auto server = NSBOX_TRY(HelperProcess::start({path, argv, fds, helper_environment(), what}));
  config_r.reset();
  report_w.reset();
  std::string text = config.dump();
  (void)send_config(std::move(config_w), text, "the bucket server");  // it holds the credentials

  auto line = read_report(report_r.get(), kBucketServerReadyMs, what + ": its server");
  json answer = line ? json::parse(*line, nullptr, false) : json();
  if (!line) return fail(std::move(line.error()));  // `server` is killed as it goes
  if (answer.is_discarded() || !answer.is_object())
    return fail(make_error(ErrorCode::kInternal, what + ": its server exited without a report (see the supervisor log)"));
  if (!answer.value("ok", false)) {
    const json& e = answer["error"];
    return fail(make_error(error_code_from_name(e.value("code", "internal")), e.value("message", what + ": failed"),
                           e.value("hint", "")));
  }
  return server;  // a probe's is done: it goes when the caller drops it
}

Result<void> BucketServers::start_one(const bucket::MountRequest& request, const BucketServerPaths& paths, size_t index,
                                      pid_t init_pid, uid_t uid, gid_t gid) {
  const bucket::BucketMount& mount = request.mount;
  std::string what = "mount " + mount.describe();
  Server server;
  json config = {{"mount", mount.to_json()}, {"credentials", request.credentials.to_json()},
                 {"staging_dir", paths.staging_dir}, {"uid", uid}, {"gid", gid}};
  // A serving builtin server logs to a file of its own, rotated like the supervisor's
  // (isolation/sys/log.h), as an external tool does to <N>.log; a probe, a few lines at
  // most, writes to the supervisor's log.
  const std::string server_log = paths.mounts_dir + "/" + std::to_string(index) + ".log";

  if (::geteuid() != 0) {
    // Rootless: mounted from inside the sandbox, served through the descriptor. The ids the
    // server reports are the sandbox's own (the connection belongs to its user namespace).
    auto fuse = mount_injection::mount_fuse_inside(
        init_pid, {"nsbox-bucket:" + mount.bucket, mount.mount_path, mount.read_only, userns::kSandboxUid, userns::kSandboxGid});
    if (!fuse) return fail(std::move(fuse.error()).context(what));
    config["mountpoint"] = "/dev/fd/4";
    config["log_file"] = server_log;
    config["uid"] = userns::kSandboxUid;
    config["gid"] = userns::kSandboxGid;
    server.process = NSBOX_TRY(run_bucketfs(paths.server, config, false, what, fuse->get()));
    servers_.push_back(std::move(server));
    return {};
  }
  std::string base = paths.mounts_dir + "/" + std::to_string(index);
  server.host_mountpoint = base;
  if (::mkdir(base.c_str(), 0700) != 0 && errno != EEXIST) return fail(sys_error("mkdir " + base).context(what));
  config["mountpoint"] = base;
  if (mount.strategy == bucket::MountStrategy::kBuiltin) {
    config["log_file"] = server_log;
    server.process = NSBOX_TRY(run_bucketfs(paths.server, config, false, what));
  } else {
    // <data>/staging/<sandbox id>-N: `nsbox rm` removes what a killed supervisor left there.
    bucket::HelperPaths helper_paths{base, base + ".secrets", paths.staging_dir + "/" + paths.sandbox_id + "-" + std::to_string(index),
                                     uid, gid};
    bound_tool_cache(helper_paths, paths.staging_dir);
    auto program = bucket::find_helper(mount.strategy);
    if (!program) return fail(std::move(program.error()).context(what));
    auto command = bucket::helper_command(*program, mount, request.credentials, helper_paths);
    if (!command) return fail(std::move(command.error()).context(what));
    // The same check as the builtin strategy's first, so that a missing bucket or a refused
    // key reads the same whichever tool serves the mount.
    NSBOX_CHECK(run_bucketfs(paths.server, config, true, what));  // the probe is killed at once
    server.cache_dir = helper_paths.cache_dir;
    NSBOX_CHECK(files::ensure_private_dir(helper_paths.secrets_dir));
    NSBOX_CHECK(files::ensure_private_dir(helper_paths.cache_dir));
    auto helper = start_helper_mount(*command, server_log, base, request.credentials, what);
    ::rmdir(helper_paths.secrets_dir.c_str());
    if (!helper) {
      (void)files::remove_tree(server.cache_dir);
      return fail(std::move(helper.error()));
    }
    server.process = std::move(*helper);
  }
  servers_.push_back(std::move(server));
  unsigned attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (mount.read_only ? MOUNT_ATTR_RDONLY : 0);
  auto attached = mount_injection::inject(base, init_pid, mount.mount_path, attrs);
  if (!attached) return fail(std::move(attached.error()).context(what));
  return {};
}

std::vector<pid_t> BucketServers::pids() const {
  std::vector<pid_t> out;
  for (const auto& s : servers_) out.push_back(s.process.pid());
  return out;
}

std::vector<int> BucketServers::pidfds() const {
  std::vector<int> out;
  for (const auto& s : servers_) out.push_back(s.process.pidfd());
  return out;
}

void BucketServers::on_exit(int pidfd) {
  for (auto& s : servers_) {
    if (s.process.pidfd() != pidfd) continue;
    if (std::string how = s.process.reap(); !how.empty())
      log::warn("the server of " + s.process.what() + " " + how + "; the mount answers ENOTCONN");
  }
}

// Every server at once, so that the bound is that of one. nsbox-bucketfs ends its FUSE
// session at SIGTERM and unmounts (rootless, the mount is the sandbox's and goes with it);
// rclone and s3fs unmount at SIGTERM too. A server still there after the grace is killed:
// its /dev/fuse closes and the kernel aborts the connection, failing every request in
// flight at once.
void BucketServers::stop() {
  if (servers_.empty()) return;
  std::vector<HelperProcess*> processes;
  for (auto& s : servers_) processes.push_back(&s.process);
  HelperProcess::stop_all(processes, kTermGraceMs, kKillWaitMs);
  for (auto& s : servers_) {
    if (!s.host_mountpoint.empty()) {  // rootless mounts are in the sandbox only: they go with it
      ::umount2(s.host_mountpoint.c_str(), MNT_DETACH);  // a killed server left it mounted
      ::rmdir(s.host_mountpoint.c_str());
    }
    if (!s.cache_dir.empty()) (void)files::remove_tree(s.cache_dir);
  }
  servers_.clear();
}

}  // namespace nsbox
