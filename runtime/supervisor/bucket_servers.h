// The FUSE servers of a sandbox's bucket mounts: one process per mount (nsbox-bucketfs,
// or rclone/s3fs for those strategies), children of the supervisor, on the host side. Each mounts its bucket in the supervisor's
// private mount namespace; that mount is then attached in the sandbox (mount_injection).
//
// A server is killed with the supervisor (PR_SET_PDEATHSIG). A server that dies leaves its
// mount answering ENOTCONN; stopping never waits on a hung one: killing the server closes
// /dev/fuse, which aborts the connection.
#pragma once

#include <sys/types.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "isolation/sys/unique_fd.h"
#include "mounts/bucket/mount_spec.h"

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
  void stop();

 private:
  struct Server {
    pid_t pid = 0;
    UniqueFd pidfd;
    std::string host_mountpoint;
    std::string what;  // "mount s3://... at /data (read-write)"
    std::string cache_dir;  // an external tool's; removed at stop
    bool gone = false;
  };
  Result<pid_t> run_bucketfs(const std::string& path, const nlohmann::json& config, bool probe_only, const std::string& what);
  Result<void> start_one(const bucket::MountRequest& request, const BucketServerPaths& paths, size_t index, pid_t init_pid,
                         uid_t uid, gid_t gid);
  std::vector<Server> servers_;
};

}  // namespace nsbox
