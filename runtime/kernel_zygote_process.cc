#include "runtime/kernel_zygote_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "isolation/sys/child_fds.h"
#include "isolation/sys/syscall.h"
#include "runtime/command.h"
#include "runtime/protocol/unix_socket.h"

namespace nsbox {
namespace {

std::vector<char*> c_strings(std::vector<std::string>& items) {
  std::vector<char*> out;
  for (auto& s : items) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

void end(pid_t pid) {
  ::kill(pid, SIGKILL);
  (void)sys::retry_eintr([&] { return ::waitpid(pid, nullptr, 0); });
}

}  // namespace

Result<std::unique_ptr<KernelZygoteProcess>> KernelZygoteProcess::start(const InstallLayout& layout, const std::string& run_dir) {
  std::string socket_path = run_dir + "/kernel-zygote-" + std::to_string(::getpid()) + ".sock";
  // Made 0600 by the umask at bind: no moment when another user could connect (the
  // callers start it before any thread of theirs, so the umask is nobody else's).
  mode_t umask_before = ::umask(0177);
  auto listened = protocol::listen_unix(socket_path, SOCK_SEQPACKET);
  ::umask(umask_before);
  UniqueFd listening = NSBOX_TRY(std::move(listened));
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return fail(sys_error("pipe2"));
  UniqueFd ready_r(ready[0]), ready_w(ready[1]);

  std::string program = layout.libexec_dir + "/nsbox-kernel-zygote";
  std::vector<std::string> args = {program, "--listen-fd", "3", "--sandbox-dir", layout.sandbox_dir(), "--ready-fd", "4"};
  std::vector<std::string> env = kernel_zygote_environment();
  // Every symbol bound at the zygote's start, once: bound lazily, each kernel would look
  // up again, in its own copy, every function the zygote had not called yet. The zygote
  // takes it out of its environment before Python reads it.
  env.push_back("LD_BIND_NOW=1");
  auto argv = c_strings(args);
  auto envp = c_strings(env);
  pid_t parent = ::getpid();
  pid_t pid = sys::fork_child();
  if (pid == 0) {
    sys::prepare_child(parent, {-1, STDERR_FILENO, STDERR_FILENO, listening.get(), ready_w.get()});
    ::execve(program.c_str(), argv.data(), envp.data());
    ::_exit(127);
  }
  if (pid < 0) return fail(sys_error("fork the kernel zygote"));
  ready_w.reset();
  pollfd p{ready_r.get(), POLLIN, 0};
  char byte = 0;
  bool answered = sys::retry_eintr([&] { return ::poll(&p, 1, kStartTimeoutMs); }) == 1;
  if (!answered || sys::retry_eintr([&] { return ::read(ready_r.get(), &byte, 1); }) != 1 || byte != '1') {
    end(pid);
    ::unlink(socket_path.c_str());
    return fail(make_error(ErrorCode::kInternal, "the kernel zygote (" + program + ") " +
                                                     (answered ? std::string("exited before it served")
                                                               : "did not serve within " + std::to_string(kStartTimeoutMs / 1000) + " s") +
                                                     "; its reason is on the server's stderr"));
  }
  return std::unique_ptr<KernelZygoteProcess>(new KernelZygoteProcess(std::move(socket_path), pid));
}

KernelZygoteProcess::~KernelZygoteProcess() {
  end(pid_);
  ::unlink(socket_path_.c_str());
}

}  // namespace nsbox
