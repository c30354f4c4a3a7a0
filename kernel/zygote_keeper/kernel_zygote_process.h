// `nsbox serve`'s kernel zygote (docs/kernel-zygote.md), started with the server and
// kept until it stops. Its socket is handed to every supervisor the server starts
// (SupervisorSpec::kernel_zygote); a supervisor that cannot reach it, or is refused,
// starts its kernel through init.
//
// Kept: a zygote that ends is started again by a thread of this object's (which the
// zygote dies with: PR_SET_PDEATHSIG), at once, and after 1, 2, 4... up to 60 s while it
// keeps ending within a minute of its start. While none serves (the delay, and a new
// zygote's start), connections to the socket are closed at once, so no supervisor waits
// for one. A zygote one of whose files was replaced (an install of another build, a host
// update of libpython or glibc) is ended and started again, within `check_every`. A
// zygote alive but wedged (stopped, or stuck in a call) is found by a ping on a connection
// of our own every `check_every`: one left unanswered for `wedged_after` ends it, and it is
// started again as one that ended is (the delays above). Until then, supervisors that ask
// it wait out their own 10 s bound once each and start their kernels through init.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"
#include "runtime/core/install_layout.h"

namespace nsbox {

struct KernelZygoteOptions {
  // Before the n-th start again in a row of a zygote that ended within
  // KernelZygoteProcess::kHealthyLife of its start (the last repeats).
  std::vector<std::chrono::milliseconds> restart_delays = {
      std::chrono::milliseconds(0), std::chrono::seconds(1),  std::chrono::seconds(2),  std::chrono::seconds(4),
      std::chrono::seconds(8),      std::chrono::seconds(16), std::chrono::seconds(32), std::chrono::seconds(60)};
  // How often a serving zygote's files are compared with those on disk, and it is pinged.
  std::chrono::milliseconds check_every{10000};
  // A ping unanswered this long: the zygote is wedged. A serving zygote answers at once,
  // but it may be in a request's wait for its supervisor (2 s at most) or short of CPU.
  std::chrono::milliseconds wedged_after{10000};
};

class KernelZygoteProcess {
 public:
  static constexpr int kStartTimeoutMs = 30000;
  // A zygote that served this long before it ended is started again at once.
  static constexpr std::chrono::seconds kHealthyLife{60};

  // Whether this host and process can use one: root (its kernels join a sandbox as host
  // root before they drop every privilege), and a process group signalled by pidfd
  // (Linux >= 6.9). The error says which is missing.
  static Result<void> usable();

  // Listens on `<run_dir>/kernel-zygote-<our pid>.sock` (mode 0600 from the bind on; the
  // zygote also checks each peer is its own user), starts nsbox-kernel-zygote and waits
  // (bounded) until it serves. Call before starting threads: it sets the umask.
  static Result<std::unique_ptr<KernelZygoteProcess>> start(const InstallLayout& layout, const std::string& run_dir,
                                                            KernelZygoteOptions options = {});
  ~KernelZygoteProcess();  // kills the zygote (its kernels live on) and removes the socket

  KernelZygoteProcess(const KernelZygoteProcess&) = delete;
  KernelZygoteProcess& operator=(const KernelZygoteProcess&) = delete;

  const std::string& socket_path() const { return socket_path_; }
  pid_t pid() const { return pid_.load(); }  // the zygote serving now; 0 while none does
  int starts() const { return starts_.load(); }
  int pings_answered() const { return pings_answered_.load(); }  // by any zygote it kept

 private:
  KernelZygoteProcess(const InstallLayout& layout, std::string socket_path, UniqueFd listening, UniqueFd stop, KernelZygoteOptions options);

  void keep(std::promise<Result<void>> first);
  Result<pid_t> spawn();
  // Until the zygote ends (kEnded, `status` its wait status), the server stops (kStopped),
  // a file it runs from is found replaced (kStale) or it leaves a ping unanswered
  // (kWedged); it is gone in each case.
  enum class End { kEnded, kStopped, kStale, kWedged };
  End wait_for_end(pid_t pid, int* status);
  bool refuse_until(std::chrono::steady_clock::time_point until);  // true: asked to stop
  void refuse_one();

  std::string program_, sandbox_dir_, socket_path_;
  UniqueFd listening_, stop_;
  KernelZygoteOptions options_;
  std::atomic<pid_t> pid_{0};
  std::atomic<int> starts_{0};
  std::atomic<int> pings_answered_{0};
  std::thread keeper_;
};

}  // namespace nsbox
