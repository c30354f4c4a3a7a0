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

// "NSpid:\t4242\t7" -> 7 (the innermost pid namespace comes last); the same for NSpgid,
// and for Tgid (one number).
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
  v.host_pid = static_cast<pid_t>(req->pid);  // the calling thread, which need not lead its process
  v.syscall = describe_syscall(req->data.arch, req->data.nr);
  // The kill is for the caller's whole process: a forbidden call from any thread ends it
  // (a thread looping on one survived hundreds of thousands of EPERMs when only a leader
  // could be killed: pidfd_open refuses a thread that is not a group leader). Its status
  // names the group (Tgid); the group's pidfd is the caller's process only if, after it
  // is opened, the notification is still pending: a thread blocked in a notified call
  // keeps its process, and so its number, alive.
  auto status = files::read_file("/proc/" + std::to_string(v.host_pid) + "/status");
  pid_t tgid = status ? innermost(*status, "Tgid:") : 0;
  UniqueFd pidfd(tgid > 0 ? sys::pidfd_open(tgid, 0) : -1);
  if (pidfd && ::ioctl(listener_fd, SECCOMP_IOCTL_NOTIF_ID_VALID, &req->id) == 0) {
    v.host_pid = tgid;
    if (auto group = files::read_file("/proc/" + std::to_string(tgid) + "/status")) {
      v.sandbox_pid = innermost(*group, "NSpid:");
      v.sandbox_pgid = innermost(*group, "NSpgid:");
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
