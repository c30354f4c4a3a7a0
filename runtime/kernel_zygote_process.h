// `nsbox serve --kernel-zygote`: the server's kernel zygote process (docs/kernel-zygote.md),
// started with the server and ended with it. Its socket is handed to every supervisor
// the server starts (SupervisorSpec::kernel_zygote); a supervisor that cannot reach it
// starts its kernel through init, as without the flag.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"
#include "runtime/install_layout.h"

namespace nsbox {

class KernelZygoteProcess {
 public:
  static constexpr int kStartTimeoutMs = 30000;

  // Listens on `<run_dir>/kernel-zygote-<our pid>.sock` (mode 0600 from the bind on; the
  // zygote also checks each peer is its own user), starts nsbox-kernel-zygote and waits
  // (bounded) until it serves. Call before starting threads: it sets the umask.
  static Result<std::unique_ptr<KernelZygoteProcess>> start(const InstallLayout& layout, const std::string& run_dir);
  ~KernelZygoteProcess();  // kills it (its kernels live on) and removes the socket

  const std::string& socket_path() const { return socket_path_; }
  pid_t pid() const { return pid_; }

 private:
  KernelZygoteProcess(std::string socket_path, pid_t pid) : socket_path_(std::move(socket_path)), pid_(pid) {}

  std::string socket_path_;
  pid_t pid_;
};

}  // namespace nsbox
