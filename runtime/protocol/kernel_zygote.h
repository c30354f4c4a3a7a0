// The kernel zygote's wire format (docs/kernel-zygote.md): a supervisor asks
// `nsbox-kernel-zygote` for a kernel in its sandbox, over a SOCK_SEQPACKET connection to
// the zygote's socket (root's only). Shared by kernel/ (the zygote) and
// runtime/supervisor/ (the asking side); no code, only the records.
//
//   supervisor → zygote   Request, with fds: init's pidfd, the kernel's stdout, stderr
//                         and channel (its fd 3), then the sandbox's cgroup files to
//                         write "0" to (v1 `tasks`, v2 `cgroup.procs`)
//   supervisor → child    one record of JSON, read by the forked child only, never by
//                         the zygote: {"env": {...}, "preload": "a,b"} (kMaxConfigBytes)
//   zygote → supervisor   Reply kForked (the kernel's host pid; fd: its pidfd)
//   child → supervisor    Reply kReady (fd: its seccomp listener), or kFailed (a step)
//   zygote → supervisor   Reply kExited (its wait status), when the zygote reaped it
//
// The zygote reads only the Request: the environment (which may hold the caller's keys)
// never enters its memory, so it cannot reach the next sandbox's kernel by fork.
#pragma once

#include <cstdint>

namespace nsbox::kernel_zygote {

constexpr uint32_t kMagic = 0x6e737a31;  // "nsz1"
constexpr uint32_t kFixedFds = 4;        // pidfd, stdout, stderr, channel
constexpr uint32_t kMaxCgroupFds = 12;
constexpr uint32_t kMaxConfigBytes = 1u << 20;

struct Request {
  uint32_t magic = kMagic;
  uint32_t cgroup_fds = 0;  // after the fixed four
  char sandbox[64] = {};    // the sandbox's id, for the zygote's log only
};

enum class ReplyKind : uint32_t { kForked = 1, kReady = 2, kFailed = 3, kExited = 4 };

struct Reply {
  ReplyKind kind{};
  int32_t pid = 0;         // kForked: the kernel's pid on the host
  int32_t error = 0;       // kFailed: errno of the step
  int32_t status = 0;      // kExited: as waitpid gives it
  char message[200] = {};  // kFailed: the step that failed, with its error
};

}  // namespace nsbox::kernel_zygote
