// What a sandbox leaves on disk, removed: its volumes (a named files volume stays), its
// bucket mounts' caches and handed-out files, its run directory and its name. Called with
// the sandbox's lock held and nothing of it running: by `nsbox rm` (runtime/client), and
// by its supervisor when its time to live runs out.
#pragma once

#include <string>

#include "isolation/sys/error.h"
#include "runtime/core/sandbox_record.h"
#include "runtime/core/state_store.h"

namespace nsbox {

// <data>/staging/<id>-N (rclone's or s3fs's cache for mount N; the supervisor removes
// them when it stops, one that was killed leaves them) and <data>/shared/<id> (the files
// the sandbox handed out with upload_local_file).
Result<void> remove_mount_caches(const StateRoot& root, const std::string& id);

// Everything of sandbox `id` on disk. `record` is its record when it could be read (a
// sandbox whose record is gone or corrupt still loses its directory and caches);
// `keep_files`: its own files volume becomes a named one of the same name instead.
Result<void> remove_sandbox_files(const StateStore& store, const std::string& id, const Result<SandboxRecord>& record,
                                  bool keep_files);

}  // namespace nsbox
