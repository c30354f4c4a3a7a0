// Where nsbox's own files are: the host-side helpers and the directory bound read-only at
// /opt/nsbox in every sandbox.
//
//   <prefix>/bin/nsbox
//   <prefix>/libexec/nsbox/nsbox-supervisor
//   <prefix>/libexec/nsbox/nsbox-bucketfs           (a bucket mount's FUSE server)
//   <prefix>/libexec/nsbox/nsbox-toolbridge         (a sandbox's tool bridge)
//   <prefix>/libexec/nsbox/nsbox-server             (`nsbox serve`: the HTTP API)
//   <prefix>/libexec/nsbox/nsbox-archive            (snapshots: packs and unpacks volumes)
//   <prefix>/libexec/nsbox/sandbox/nsbox-init        -> /opt/nsbox/nsbox-init
//   <prefix>/libexec/nsbox/sandbox/etc/{passwd,group,hosts}
//
// The build tree has the same shape, so nsbox runs from it without installing.
// NSBOX_LIBEXEC overrides the discovery.
#pragma once

#include <string>

#include "isolation/sys/error.h"

namespace nsbox {

struct InstallLayout {
  std::string libexec_dir;

  static Result<InstallLayout> discover();
  std::string supervisor() const { return libexec_dir + "/nsbox-supervisor"; }
  std::string sandbox_dir() const { return libexec_dir + "/sandbox"; }
  std::string bucket_server() const { return libexec_dir + "/nsbox-bucketfs"; }
  std::string tool_bridge() const { return libexec_dir + "/nsbox-toolbridge"; }
  std::string net_proxy() const { return libexec_dir + "/nsbox-netproxy"; }
  std::string api_server() const { return libexec_dir + "/nsbox-server"; }
  // In the sandbox's directory: the host runs it for snapshots, a sandbox for fs:extract.
  std::string archiver() const { return sandbox_dir() + "/nsbox-archive"; }
  std::string snapshot_store() const { return libexec_dir + "/nsbox-snapstore"; }
  // What every new home volume is formatted with (kernel/tools/make_home_skeleton.py).
  std::string home_skeleton() const { return libexec_dir + "/home-skeleton"; }
};

}  // namespace nsbox
