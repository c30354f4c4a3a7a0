// What this host can do, probed outside any sandbox, for tests that depend on it.
//
// Machines differ: one here faults on `int $0x80` even outside any sandbox, another has
// no loop devices or no Node. A test that relies on a host feature asks here first; where
// the feature is missing it asserts what must still hold and says what it could not
// check (`partial`), or it skips and says why (NSBOX_NEEDS, NSBOX_SKIP_FOR). A skipped
// test prints "SKIP: <reason> [doctor: <check>]" and exits with kSkipExitCode, which
// CTest records as a skip (SKIP_RETURN_CODE: a failure always wins). `make test` ends
// with a list of both (tests/report_skips), and fails when `nsbox doctor` says this host
// has what a skipped test said it lacked: no skip can hide a feature the host supports.
// What scripts/install-deps installs (the peers, pdftotext, slirp4netns, nft, rclone,
// s3fs, a locale compiler) is never a reason to skip under `make test`: its absence fails
// the test (`required`).
#pragma once

#include <cstdint>
#include <string>

namespace nsbox::test {

// The exit status of a test program whose test was skipped (the automake convention).
constexpr int kSkipExitCode = 77;

struct HostFeature {
  bool present = false;
  std::string absent_because;  // why not, in words a reader of the test log understands
  // Absent, it fails the tests that need it instead of skipping them: `make test`
  // installs it (NSBOX_TEST_PEERS=required under CTest, see tests/CMakeLists.txt).
  bool required = false;
  // The check of `nsbox doctor --json` that says whether this host has the feature: a
  // check's name ("/dev/fuse", "files quotas", "kernel zygote"), "root" (doctor's mode),
  // or "rootless user namespaces" (doctor's "user namespaces" for an unprivileged user);
  // "none" for a need of the test's own that nsbox does not have (an exec-able /tmp). A
  // skip names it; tests/report_skips fails `make test` when doctor says ok.
  std::string doctor;
};

// The test runs as root (most of the suite does: root mode's cgroups, loop devices,
// network namespaces of the test's own).
const HostFeature& root();
// A file scripts/install-deps installs (`path`, from the Debian package `package`):
// required under CTest, never a skip there.
HostFeature installed(const std::string& path, const std::string& package);
// /dev/net/tun (`--net internet`'s NAT helper).
const HostFeature& tun_device();

// The i386 syscall entry (`int $0x80`) works for an ordinary process on this host.
const HostFeature& i386_syscalls();
// Loop devices can be attached (files volumes with a quota are ext4 images on them).
const HostFeature& loop_devices();
// An unprivileged user can create a user namespace (rootless sandboxes).
const HostFeature& unprivileged_user_namespaces();
// node and the npm packages of tests/peers (s3rver, Azurite). `make test` installs them
// (scripts/install-deps), so under CTest (NSBOX_TEST_PEERS=required) their absence fails
// the tests that need them; a test binary run by hand skips them, saying why.
const HostFeature& node_peers();
// Root can give a sandbox its own memory, pids and cpu cgroups here (v1 hierarchies or
// the v2 tree with those controllers): the size tiers' limits, OOM reports, resize.
const HostFeature& cgroup_limits();
// /dev/fuse is a character device here (bucket mounts).
const HostFeature& fuse_device();
// rclone and s3fs are on the PATH (the external bucket-mount strategies; install-deps
// installs them: required under CTest).
const HostFeature& mount_tools();

// A kernel zygote can serve here (kernel/zygote_keeper/kernel_zygote_process.h, usable()): root, and a
// process group signalled by pidfd (PIDFD_SIGNAL_PROCESS_GROUP, Linux >= 6.9).
const HostFeature& kernel_zygote();

// How this host's cgroups are mounted, read from /proc/self/mountinfo (not the way nsbox
// detects it, statfs): "unified" (cgroup2 at /sys/fs/cgroup), "hybrid" (v1 hierarchies on
// a tmpfs, and cgroup2 at /sys/fs/cgroup/unified), "legacy" (v1 only), or "" when
// /sys/fs/cgroup is none of these.
std::string cgroup_layout();

// A bound on a host program's memory (RSS, peak RSS) for this build: `bytes`, plus 448 MiB
// in the sanitizer build, where ASan keeps 256 MiB of freed memory in quarantine and pads
// every allocation. What such a bound shows (memory not in proportion to a gigabyte of
// output, a 2,000-deep tree) still holds below 512 MiB.
constexpr uint64_t host_memory_bound(uint64_t bytes) {
#ifdef __SANITIZE_ADDRESS__
  return bytes + (448ull << 20);
#else
  return bytes;
#endif
}

// Marks the running test as skipped for want of what the doctor check `doctor` reports
// (HostFeature::doctor): "SKIP: <reason> [doctor: <check>]" is printed when it ends, and
// the program exits with kSkipExitCode, unless an assertion of it failed (tests/support/
// main.cc). Use NSBOX_NEEDS or NSBOX_SKIP_FOR, which return.
void announce_skip(const std::string& reason, const std::string& doctor);
std::string take_announced_skip();  // for the reporter: the SKIP line's text, cleared
// Prints "PARTIAL: <reason>": the test ran, and checked less than on a host with the feature.
void announce_partial(const std::string& reason);

}  // namespace nsbox::test

// Skips the rest of the test, saying why and which check of `nsbox doctor` says this host
// lacks it. Catch2 2.13 has no SKIP().
#define NSBOX_SKIP_FOR(doctor_check, reason)                  \
  do {                                                        \
    ::nsbox::test::announce_skip(reason, doctor_check);       \
    return;                                                   \
  } while (false)

// At the top of a test that cannot run without a host feature: skips it, saying why,
// where the feature is missing (fails it instead if the feature is `required`).
#define NSBOX_NEEDS(feature)                                                                  \
  do {                                                                                        \
    const ::nsbox::test::HostFeature& nsbox_needed_ = (feature);                              \
    if (!nsbox_needed_.present) {                                                             \
      if (nsbox_needed_.required) FAIL("needs " #feature ": " << nsbox_needed_.absent_because); \
      NSBOX_SKIP_FOR(nsbox_needed_.doctor, #feature ": " + nsbox_needed_.absent_because);     \
    }                                                                                         \
  } while (false)
