#include "mounts/volume_image.h"

#include <fcntl.h>
#include <linux/loop.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>
#include <thread>

#include "isolation/sys/files.h"
#include "isolation/sys/program.h"
#include "isolation/sys/syscall.h"

namespace nsbox::volume_image {
namespace {

constexpr uint64_t kMinBytes = 16ull << 20;

// How long attaching waits for a loop device while others are taking them. Each wait is
// short (a LOOP_CONFIGURE takes milliseconds); the bound is for a host that has run out.
constexpr auto kAttachPatience = std::chrono::seconds(10);
// How long taking an image's lock waits for another holder: longer than its attach can.
constexpr auto kLockPatience = std::chrono::seconds(30);

// Pauses 1 ms, then twice as long each time up to 50 ms: enough for another process's
// LOOP_CONFIGURE to finish, short enough not to slow a busy host's creates.
void pause_before_retry(int attempt) {
  auto ms = std::min(50, 1 << std::min(attempt, 6));
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

struct ImageLock {
  UniqueFd fd;
  // No nsbox process has attached this image, so no loop device can back it and the
  // search of every one (two for each create, ~0.5 ms with 144 devices) is skipped. Known
  // only with the lock held: we made the lock file (which goes only with the image:
  // VolumeStore::remove), and it is still empty, so nobody who took the lock before us
  // attached (each attach marks it: mark_attached). A lock file of an nsbox from before
  // the mark existed was not made by us: searched.
  bool never_attached = false;
};

// Serialises find-or-attach for one image across processes. Bounded: a holder only finds
// or attaches a loop device (at most kAttachPatience); a stuck one must not hang every
// create that names the same volume.
Result<ImageLock> lock_image(const std::string& image) {
  std::string path = image + ".lock";
  ImageLock lock;
  lock.fd.reset(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  bool made_here = static_cast<bool>(lock.fd);
  if (!lock.fd && errno == EEXIST) lock.fd.reset(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!lock.fd) return fail(sys_error("open " + path));
  UniqueFd& fd = lock.fd;
  auto give_up_at = std::chrono::steady_clock::now() + kLockPatience;
  for (int attempt = 0; ::flock(fd.get(), LOCK_EX | LOCK_NB) != 0; ++attempt) {
    if (errno != EWOULDBLOCK && errno != EINTR) return fail(sys_error("lock " + path));
    if (std::chrono::steady_clock::now() >= give_up_at)
      return fail(make_error(ErrorCode::kTimeout, "the lock " + path + " was held for " +
                                                      std::to_string(kLockPatience.count()) + " s by another nsbox process",
                             "a process attaching or mounting that volume is stuck: `nsbox doctor`, or the kernel log"));
    pause_before_retry(attempt);
  }
  struct stat st{};
  lock.never_attached = made_here && ::fstat(fd.get(), &st) == 0 && st.st_size == 0;
  return lock;
}

// Under the lock: the next holder is to search (ImageLock::never_attached).
void mark_attached(const ImageLock& lock) {
  struct stat st{};
  if (::fstat(lock.fd.get(), &st) == 0 && st.st_size == 0) (void)::pwrite(lock.fd.get(), "a", 1, 0);
}

// The loop device already backed by `image` (same inode), opened: sysfs names the
// candidates, LOOP_GET_STATUS64 on the open device confirms it (it could have been
// cleared and reused in between).
std::optional<Attached> find_attached(const std::string& image) {
  struct stat want{};
  if (::stat(image.c_str(), &want) != 0) return std::nullopt;
  std::error_code ec;
  for (const auto& dev : std::filesystem::directory_iterator("/sys/block", ec)) {
    std::string name = dev.path().filename();
    if (name.rfind("loop", 0) != 0 || !files::exists(dev.path().string() + "/loop/backing_file")) continue;
    UniqueFd fd(::open(("/dev/" + name).c_str(), O_RDWR | O_CLOEXEC));
    loop_info64 info{};
    if (fd && ::ioctl(fd.get(), LOOP_GET_STATUS64, &info) == 0 && info.lo_inode == want.st_ino &&
        info.lo_device == want.st_dev)
      return Attached{"/dev/" + name, std::move(fd)};
  }
  return std::nullopt;
}

// LOOP_CTL_GET_FREE hands the same free device to everyone who asks until one of them has
// configured it; the others get EBUSY. Twenty creates at once on the same host used to run
// out of quick retries ("no free loop device"). So nsbox processes take turns: an exclusive
// flock on /dev/loop-control (host-wide, no file of our own) around get-free + configure.
// Other programs (losetup, udev) do not take it; their races end in EBUSY, and we pause
// and ask again until kAttachPatience has passed.
Result<Attached> attach_new(const std::string& image) {
  UniqueFd control(::open("/dev/loop-control", O_RDWR | O_CLOEXEC));
  if (!control) return fail(sys_error("open /dev/loop-control").with_hint("volume quotas need loop devices (root)"));
  UniqueFd backing(::open(image.c_str(), O_RDWR | O_CLOEXEC));
  if (!backing) return fail(sys_error("open volume image " + image));
  auto give_up_at = std::chrono::steady_clock::now() + kAttachPatience;
  std::string last_busy;
  for (int busy = 0; std::chrono::steady_clock::now() < give_up_at;) {
    if (::flock(control.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) return fail(sys_error("lock /dev/loop-control"));
      // Another nsbox is attaching: its turn ends in a millisecond or so.
      std::this_thread::sleep_for(std::chrono::microseconds(500));
      continue;
    }
    int n = ::ioctl(control.get(), LOOP_CTL_GET_FREE);
    if (n < 0) return fail(sys_error("LOOP_CTL_GET_FREE"));
    std::string dev = "/dev/loop" + std::to_string(n);
    UniqueFd loop(::open(dev.c_str(), O_RDWR | O_CLOEXEC));
    if (!loop) return fail(sys_error("open " + dev));
    // Direct I/O: the loop device reads and writes the image without a second copy in
    // the page cache; buffered, the same data is cached twice and written back twice,
    // which made uploads 4-5x slower than writing the host's disk (docs/performance.md).
    // A backing file system without O_DIRECT gets the buffered device.
    loop_config config{};
    config.fd = static_cast<uint32_t>(backing.get());
    config.info.lo_flags = LO_FLAGS_AUTOCLEAR | LO_FLAGS_DIRECT_IO;
    std::strncpy(reinterpret_cast<char*>(config.info.lo_file_name), image.c_str(), LO_NAME_SIZE - 1);
    int rc = ::ioctl(loop.get(), LOOP_CONFIGURE, &config);
    if (rc != 0 && errno == EINVAL) {
      config.info.lo_flags = LO_FLAGS_AUTOCLEAR;
      rc = ::ioctl(loop.get(), LOOP_CONFIGURE, &config);
    }
    int err = errno;
    ::flock(control.get(), LOCK_UN);
    if (rc == 0) return Attached{dev, std::move(loop)};
    if (err != EBUSY) return fail(sys_error("attach " + image + " to " + dev, err));
    last_busy = dev;  // taken by a program that does not take turns with us: ask again
    pause_before_retry(++busy);
  }
  return fail(make_error(ErrorCode::kBusy, "no free loop device for " + image + " after " +
                                               std::to_string(kAttachPatience.count()) + " s" +
                                               (last_busy.empty() ? " (waiting for other nsbox processes)"
                                                                  : " (" + last_busy + " taken by another program)")));
}

// A format of even a large image takes seconds (lazy inode tables); a hung one (a stuck
// disk) is ended.
constexpr double kMkfsTimeoutS = 300;

// mkfs.ext4 where Debian puts it, or on PATH.
std::string find_mkfs() {
  std::string dirs = "/usr/sbin:/sbin";
  if (const char* path = ::getenv("PATH")) dirs += std::string(":") + path;
  std::istringstream s(dirs);
  for (std::string dir; std::getline(s, dir, ':');)
    if (!dir.empty() && ::access((dir + "/mkfs.ext4").c_str(), X_OK) == 0) return dir + "/mkfs.ext4";
  return {};
}

}  // namespace

Result<void> available() {
  if (::geteuid() != 0) return fail(make_error(ErrorCode::kPermissionDenied, "rootless: loop devices need root"));
  UniqueFd control(::open("/dev/loop-control", O_RDWR | O_CLOEXEC));
  if (!control) return fail(sys_error("open /dev/loop-control").with_hint("modprobe loop (in a container: give it /dev/loop-control)"));
  if (find_mkfs().empty()) return fail(make_error(ErrorCode::kNotFound, "mkfs.ext4 not found", "apt-get install e2fsprogs"));
  return {};
}

Result<void> create(const std::string& path, uint64_t bytes, uid_t owner, gid_t group, const std::string& contents) {
  const std::string mkfs = find_mkfs();
  if (mkfs.empty()) return fail(make_error(ErrorCode::kNotFound, "mkfs.ext4 not found", "apt-get install e2fsprogs"));
  {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!fd) return fail(sys_error("create volume image " + path));
    if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
      ::unlink(path.c_str());
      return fail(sys_error("size volume image " + path));
    }
  }
  // No resize_inode: its reserved descriptor blocks (for growing the filesystem while
  // mounted, which nsbox never does) were 4 MiB written and half of mkfs's CPU per image;
  // an offline resize2fs still works without them.
  std::string owner_opt = "root_owner=" + std::to_string(owner) + ":" + std::to_string(group) +
                          ",lazy_itable_init=1,lazy_journal_init=1";
  std::vector<std::string> argv = {mkfs, "-q", "-F", "-m", "0", "-O", "^resize_inode", "-E", owner_opt};
  if (!contents.empty()) argv.insert(argv.end(), {"-d", contents});
  argv.push_back(path);
  // Its own environment (no MKE2FS_CONFIG or locale of the caller's), bounded in time,
  // its stderr kept (the end of it) for the error.
  auto run = sys::run_program(argv, "", {"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, "", kMkfsTimeoutS, 1 << 16, 2048);
  if (run.status != 0) {
    ::unlink(path.c_str());
    std::string said = run.err;
    while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
    std::replace(said.begin(), said.end(), '\n', ' ');
    std::string why = run.timed_out  ? "it did not finish within " + std::to_string(static_cast<int>(kMkfsTimeoutS)) + " s"
                      : run.status < 0 ? "it could not be started: " + said
                                       : "it " + sys::describe_wait_status(run.status) + (said.empty() ? "" : ": " + said);
    return fail(make_error(ErrorCode::kSystem, mkfs + " " + path + " failed: " + why));
  }
  return {};
}

Result<void> copy(const std::string& formatted, const std::string& path) {
  UniqueFd in(::open(formatted.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in) return fail(sys_error("open volume image " + formatted));
  struct stat st{};
  if (::fstat(in.get(), &st) != 0) return fail(sys_error("stat volume image " + formatted));
  UniqueFd out(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!out) return fail(sys_error("create volume image " + path));
  auto copied = files::copy_sparse(in.get(), out.get(), static_cast<uint64_t>(st.st_size), formatted, path);
  // Synced before it is used: after a crash, a half-written copy would be a corrupt
  // filesystem handed to a sandbox.
  if (!copied || ::fsync(out.get()) != 0) {
    Error e = copied ? sys_error("fsync volume image " + path) : std::move(copied.error());
    ::unlink(path.c_str());
    return fail(std::move(e));
  }
  return {};
}

Result<Attached> attach(const std::string& image) {
  auto lock = NSBOX_TRY(lock_image(image));
  if (!lock.never_attached)
    if (auto found = find_attached(image)) return std::move(*found);
  auto attached = attach_new(image);
  if (attached) mark_attached(lock);
  return attached;
}

// ext4 reads every group's block bitmap after a mount, in a kernel thread
// (ext4lazyinit) that ran for ~1.5 s after each mount on the measured VM: beside a warm
// pool's refill, it took a CPU from the claim that followed (docs/performance.md, "Warm
// starts"). A volume is small; the allocator reads a bitmap when it first needs it.
// Linux < 5.9 does not know the option (EINVAL): there the mount goes without it. Only
// for mount(2): through fsopen, ext4 before 5.17 takes any flag and refuses it only at
// the create, so a private mount (the files API's, short-lived) goes without it.
constexpr const char* kNoPrefetch = "no_prefetch_block_bitmaps";

Result<void> mount(const std::string& image, const std::string& target) {
  auto loop = NSBOX_TRY(attach(image));  // held open until the mount holds the device
  auto mount_with = [&](const char* options) {
    return ::mount(loop.device.c_str(), target.c_str(), "ext4", MS_NOSUID | MS_NODEV, options) == 0;
  };
  if (!mount_with(kNoPrefetch) && !(errno == EINVAL && mount_with(nullptr)))
    return fail(sys_error("mount " + image + " (" + loop.device + ") on " + target));
  return {};
}

// A detached mount (fsopen, fsmount): in no mount namespace, nothing to unmount, alive as
// long as an fd refers to it (the loop device, autoclear, goes with the last). No child
// process: the files API runs in multi-threaded servers, where a fork that goes on to
// mount and allocate could deadlock on a lock another thread held.
Result<UniqueFd> open_privately(const std::string& image) {
  auto loop = NSBOX_TRY(attach(image));  // held open until the mount holds the device
  UniqueFd context(::fsopen("ext4", FSOPEN_CLOEXEC));
  if (!context) return fail(sys_error("fsopen ext4 for " + image));
  auto configure_error = [&](const char* step) {
    int err = errno;
    // The filesystem explains itself in the context's message log.
    char why[256] = {};
    ssize_t n = ::read(context.get(), why, sizeof why - 1);
    std::string detail = n > 0 ? std::string(": ") + std::string(why, static_cast<size_t>(n)) : "";
    return sys_error(std::string(step) + " " + image + " (" + loop.device + ")" + detail, err);
  };
  if (::fsconfig(context.get(), FSCONFIG_SET_STRING, "source", loop.device.c_str(), 0) != 0)
    return fail(configure_error("configure the mount of"));
  if (::fsconfig(context.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) return fail(configure_error("mount"));
  UniqueFd mount(::fsmount(context.get(), FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV));
  if (!mount) return fail(sys_error("fsmount " + image + " (" + loop.device + ")"));
  // fsmount gives an O_PATH handle on the root; the files API reads the directory itself.
  UniqueFd dir(::openat(mount.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir) return fail(sys_error("open the root of " + image));
  return dir;
}

Result<uint64_t> parse_size(const std::string& text) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  std::string unit = end ? std::string(end) : "";
  uint64_t scale = unit.empty() ? 1
                   : unit == "K" || unit == "KiB" ? 1ull << 10
                   : unit == "M" || unit == "MiB" ? 1ull << 20
                   : unit == "G" || unit == "GiB" ? 1ull << 30
                   : unit == "T" || unit == "TiB" ? 1ull << 40
                                                  : 0;
  if (end == text.c_str() || !scale || !(v > 0) || v * scale < kMinBytes || v * scale > double(1ull << 50))
    return fail(make_error(ErrorCode::kInvalidArgument, "invalid size '" + text + "'",
                           "give bytes or a size like 512M or 10G, at least 16M"));
  return static_cast<uint64_t>(v * static_cast<double>(scale));
}

}  // namespace nsbox::volume_image
