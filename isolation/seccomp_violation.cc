#include "isolation/seccomp_violation.h"

#include <linux/seccomp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <sstream>
#include <vector>

#include "isolation/seccomp_policy.h"
#include "isolation/sys/files.h"
#include "isolation/sys/syscall.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox::seccomp {
namespace {

// "NSpid:\t4242\t7" -> 7 (the innermost pid namespace comes last); same for NSpgid.
pid_t innermost(const std::string& status, std::string_view field) {
  std::istringstream lines(status);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(field, 0) != 0) continue;
    std::istringstream fields(line.substr(field.size()));
    pid_t pid = 0, last = 0;
    while (fields >> pid) last = pid;
    return last;
  }
  return 0;
}

}  // namespace

Result<Violation> take_violation(int listener_fd) {
  seccomp_notif_sizes sizes{};
  if (::syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sizes) != 0) return fail(sys_error("seccomp(GET_NOTIF_SIZES)"));
  // The kernel may know a larger struct than our headers; give it room.
  std::vector<char> req_buf(std::max<size_t>(sizes.seccomp_notif, sizeof(seccomp_notif)), 0);
  std::vector<char> resp_buf(std::max<size_t>(sizes.seccomp_notif_resp, sizeof(seccomp_notif_resp)), 0);
  auto* req = reinterpret_cast<seccomp_notif*>(req_buf.data());
  if (::ioctl(listener_fd, SECCOMP_IOCTL_NOTIF_RECV, req) != 0) return fail(sys_error("receive seccomp notification"));

  Violation v;
  v.host_pid = static_cast<pid_t>(req->pid);
  v.syscall = describe_syscall(req->data.arch, req->data.nr);
  // Kill through a pidfd, and only once the notification is known to be still pending:
  // then the pidfd is the notifying process, not a later one that reused its pid.
  UniqueFd pidfd(sys::pidfd_open(v.host_pid, 0));
  if (pidfd && ::ioctl(listener_fd, SECCOMP_IOCTL_NOTIF_ID_VALID, &req->id) == 0) {
    if (auto status = files::read_file("/proc/" + std::to_string(v.host_pid) + "/status")) {
      v.sandbox_pid = innermost(*status, "NSpid:");
      v.sandbox_pgid = innermost(*status, "NSpgid:");
    }
    // The process dies before the call is answered: it never runs another instruction.
    ::syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0);
  }
  auto* resp = reinterpret_cast<seccomp_notif_resp*>(resp_buf.data());
  resp->id = req->id;
  resp->error = -EPERM;
  (void)::ioctl(listener_fd, SECCOMP_IOCTL_NOTIF_SEND, resp);  // ENOENT: it is already gone
  return v;
}

}  // namespace nsbox::seccomp
