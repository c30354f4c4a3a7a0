// Running an external mount tool (rclone, s3fs) for a bucket mount: its secret files
// written 0600 and removed once it has mounted, its output in a log beside the mount
// point, a bounded wait until the mount is there.
#pragma once

#include <sys/types.h>

#include <string>

#include "isolation/sys/error.h"
#include "mounts/bucket/external_helpers.h"
#include "runtime/core/sandbox_spec.h"  // kHelperMountTimeoutMs
#include "runtime/supervisor/helper_process.h"

namespace nsbox {

// Returns the helper once `mountpoint` is mounted; on a failure the helper is
// killed and reaped and the error quotes the end of its log, secrets redacted. The secret
// files are gone when it returns, whatever happened.
Result<HelperProcess> start_helper_mount(const bucket::HelperCommand& command, const std::string& log_path,
                                 const std::string& mountpoint, const bucket::BucketCredentials& credentials,
                                 const std::string& what);

}  // namespace nsbox
