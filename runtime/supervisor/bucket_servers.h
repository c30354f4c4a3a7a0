// The FUSE servers of a sandbox's bucket mounts: one process per mount (nsbox-bucketfs,
// or rclone/s3fs for those strategies), children of the supervisor, on the host side.
// As root, each mounts its bucket in the supervisor's private mount namespace; that mount
// is then attached in the sandbox (mount_injection::inject). Rootless, the supervisor
// mounts the FUSE filesystem from inside the sandbox's namespaces and hands the built-in
// server its /dev/fuse descriptor (mount_injection::mount_fuse_inside); rclone and s3fs,
// which mount through fusermount3 in the caller's namespace, are root-only.
//
// A server is killed with the supervisor (PR_SET_PDEATHSIG). A server that dies leaves its
// mount answering ENOTCONN. Stopping waits at most ~2 s for a hung one, then kills it:
// closing /dev/fuse aborts the connection.
//
// The servers stop before the sandbox goes: a sandbox process waiting in a FUSE request
// (an upload at close, a download at open) cannot be killed until its server answers or
// its connection ends, so stopping the sandbox first would wait on the remote.
#pragma once

#include <sys/types.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mounts/bucket/mount_spec.h"
#include "runtime/supervisor/helper_process.h"

namespace nsbox {

struct BucketServerPaths {
  std::string server;       // libexec/nsbox/nsbox-bucketfs
  std::string mounts_dir;   // <run>/sandboxes/<id>/buckets: the host-side mount points
  std::string staging_dir;  // <data>/staging: files being written, before upload
  std::string sandbox_id;   // names an external tool's cache under staging_dir
};

class BucketServers {
 public:
  BucketServers() = default;
  BucketServers(BucketServers&&) = default;
  BucketServers& operator=(BucketServers&&) = default;
  ~BucketServers() { stop(); }

  // Starts a server per mount and attaches each mount at its path in the sandbox of
  // `init_pid`. On a failure, what was started is stopped and the error names the mount.
  static Result<BucketServers> start(const std::vector<bucket::MountRequest>& requests, const BucketServerPaths& paths,
                                     pid_t init_pid, uid_t uid, gid_t gid);
  std::vector<pid_t> pids() const;
  std::vector<int> pidfds() const;  // readable when a server exits
  // A server exited before stop(): reaped and logged; its mount answers ENOTCONN until
  // the sandbox goes.
  void on_exit(int pidfd);
  // SIGTERM to every server at once (each unmounts), SIGKILL to those still there after
  // 2 s, then their host mount points and caches go. Bounded: about 3 s at most.
  void stop();

 private:
  struct Server {
    HelperProcess process;  // its what(): "mount s3://... at /data (read-write)"
    std::string host_mountpoint;
    std::string cache_dir;  // an external tool's; removed at stop
  };
  // `fuse`: a /dev/fuse already mounted, passed as fd 4 (the config's mountpoint says
  // "/dev/fd/4"); -1: the server mounts at the config's mountpoint itself.
  Result<HelperProcess> run_bucketfs(const std::string& path, const nlohmann::json& config, bool probe_only, const std::string& what,
                             int fuse = -1);
  Result<void> start_one(const bucket::MountRequest& request, const BucketServerPaths& paths, size_t index, pid_t init_pid,
                         uid_t uid, gid_t gid);
  std::vector<Server> servers_;
};

}  // namespace nsbox
