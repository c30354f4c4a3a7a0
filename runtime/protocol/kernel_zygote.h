// The kernel zygote's wire format (docs/kernel-zygote.md): a supervisor asks
// `nsbox-kernel-zygote` for a kernel in its sandbox, over a SOCK_SEQPACKET connection to
// the zygote's socket (root's only; the zygote checks the peer is its own user). Shared
// by kernel/ (the zygote) and runtime/supervisor/ (the asking side); records only.
//
//   supervisor → zygote   Request (its build stamp included), with fds: init's pidfd,
//                         the kernel's stdout, stderr and channel (its fd 3), the
//                         kernel's end of a set-up socket pair, then the sandbox's cgroup
//                         files to write "0" to (v1 `tasks`, v2 `cgroup.procs`)
//   zygote side → supervisor, on the connection: kForked (the kernel's pidfd), sent by
//                         the zygote's intermediate child once the kernel is born in the
//                         sandbox; kFailed (a step of the zygote's side); at the kernel's
//                         end kExited (its wait status)
//   supervisor → kernel   on the set-up pair, one record of JSON read by the kernel only,
//                         never by the zygote: {"env": {...}, "preload": "a,b"}
//   kernel → supervisor   on the set-up pair: kReady (fd: its seccomp listener), or
//                         kFailed (the step, errno)
//   server → zygote       a Request with kPingMagic and no fds, which the zygote answers
//                         with kPong at once: how the server tells a zygote that serves
//                         from one alive but wedged (kernel/zygote_keeper/kernel_zygote_process.h)
//
// The zygote never holds an environment (the caller's keys), so none can reach the next
// sandbox's kernel by fork; and the kernel never holds the connection, so nothing it
// says can pass for the zygote's.
#pragma once

#include <cstdint>

namespace nsbox::kernel_zygote {

constexpr uint32_t kMagic = 0x6e737a33;      // "nsz3"
constexpr uint32_t kPingMagic = 0x6e737a70;  // "nszp"
constexpr uint32_t kFixedFds = 5;            // pidfd, stdout, stderr, channel, set-up
constexpr uint32_t kMaxCgroupFds = 12;
constexpr uint32_t kMaxConfigBytes = 1u << 20;

struct Request {
  uint32_t magic = kMagic;
  uint32_t cgroup_fds = 0;  // after the fixed five
  char sandbox[64] = {};    // the sandbox's id, for the zygote's log only
  // The asking supervisor's build stamp (kBuildStamp, cmake/build_stamp.cmake): the zygote
  // serves only its own build, so a server that outlives an install never hands out a
  // kernel with another build's filter, protocol or Python.
  char build[32] = {};
};

enum class ReplyKind : uint32_t { kForked = 1, kReady = 2, kFailed = 3, kExited = 4, kPong = 5 };

struct Reply {
  ReplyKind kind{};
  int32_t pid = 0;         // kForked: the kernel's pid on the host (its pidfd is what counts)
  int32_t error = 0;       // kFailed: errno of the step
  int32_t status = 0;      // kExited: as waitpid gives it
  char message[200] = {};  // kFailed: the step that failed, with its error
};

}  // namespace nsbox::kernel_zygote
