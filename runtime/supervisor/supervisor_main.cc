// nsbox-supervisor: started (detached) by `nsbox create` or the C++ API.
//
//   nsbox-supervisor --run-dir DIR --data-dir DIR
//   stdin:  {"record": the sandbox record to start (runtime/core/sandbox_record.h),
//            "launch": its LaunchEnvelope (env values, credentials: never written to disk)}
//   stdout: one JSON line once the sandbox is up ({"ok":true,...}) or could not be
//           ({"ok":false,"error":{...}}), then closed
//   stderr: the log, <run>/sandboxes/<id>/supervisor.log (isolation/sys/log.h: timestamped,
//           rate-limited where a sandbox can cause lines, rotated at 4 MiB to .log.1)
#include <fcntl.h>
#include <malloc.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cstring>
#include <string.h>
#include <iostream>
#include <iterator>
#include <string>

#include "isolation/sys/log.h"
#include "runtime/core/install_layout.h"
#include "runtime/supervisor/supervisor.h"
#include "isolation/sys/secret.h"

namespace {

using nsbox::protocol::Json;

void report(const Json& message) {
  std::string line = message.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
  (void)!::write(STDOUT_FILENO, line.data(), line.size());
}

int fail_start(const nsbox::Error& e) {
  Json err = {{"code", nsbox::error_code_name(e.code)}, {"message", e.message}};
  if (!e.hint.empty()) err["hint"] = e.hint;
  report({{"ok", false}, {"error", err}});
  nsbox::log::error(e.message);
  return 1;
}

// Once the sandbox is up, stdin and stdout no longer lead anywhere.
void detach_stdio() {
  int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  ::dup2(null_fd, STDIN_FILENO);
  ::dup2(null_fd, STDOUT_FILENO);
  ::close(null_fd);
}

}  // namespace

int main(int argc, char** argv) {
  nsbox::log::set_program("nsbox-supervisor");
  // A fixed threshold: blocks of 256 KiB and more (a frame, a cell's output) are mapped
  // apart and unmapped when freed. glibc's own grows to the largest block freed (up to
  // 32 MiB) and then keeps twice that of free heap: 12 MB stayed after a burst of 4 MiB
  // frames on the kernel's channel (docs/tools.md, "Limits").
  ::mallopt(M_MMAP_THRESHOLD, 256 << 10);
  std::string run_dir, data_dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--run-dir")) run_dir = argv[i + 1];
    if (!std::strcmp(argv[i], "--data-dir")) data_dir = argv[i + 1];
  }
  if (run_dir.empty() || data_dir.empty())
    return fail_start(nsbox::make_error(nsbox::ErrorCode::kInvalidArgument, "usage: nsbox-supervisor --run-dir DIR --data-dir DIR"));

  std::string input(std::istreambuf_iterator<char>(std::cin), {});
  Json j = Json::parse(input, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return fail_start(nsbox::make_error(nsbox::ErrorCode::kProtocol, "the sandbox to start, on stdin, is not a JSON object"));
  auto record = nsbox::SandboxRecord::from_json(j.value("record", Json()));
  auto launch = nsbox::LaunchEnvelope::from_json(j.value("launch", Json::object()));
  // The text and its JSON hold the mounts' credentials: only `launch` keeps them, and only
  // until the servers have them (Supervisor::start wipes them there).
  nsbox::sys::wipe(input);
  j = Json();
  if (!record) return fail_start(record.error());
  if (!launch) return fail_start(launch.error());
  const std::string id = record->id;

  nsbox::StateStore store(nsbox::StateRoot{run_dir, data_dir});
  (void)nsbox::log::open_file(store.root().log_file(id));  // without it, stderr stays
  // Held for the supervisor's whole life: `nsbox` reads "alive" from this lock.
  auto lock = store.lock_sandbox(id);
  if (!lock) return fail_start(lock.error());
  auto layout = nsbox::InstallLayout::discover();
  if (!layout) return fail_start(layout.error());
  // A mount namespace of our own (root): the files volume's mount lives here and in the
  // sandbox, never in the host's mount table, and goes when we do.
  if (::geteuid() == 0 && (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0))
    return fail_start(nsbox::sys_error("a private mount namespace for the supervisor"));

  auto supervisor = nsbox::Supervisor::start(store, std::move(*record), std::move(*launch), *layout);
  launch->wipe();
  if (!supervisor) return fail_start(supervisor.error());
  Json ready = {{"ok", true}, {"record", (*supervisor)->record().to_json()}};
  if (!(*supervisor)->fallback_reason().empty()) ready["warning"] = (*supervisor)->fallback_reason();
  report(ready);
  detach_stdio();

  auto served = (*supervisor)->serve();
  // The sandbox is gone now. Free the lock before the client sockets close (in the
  // supervisor's destructor): a client that sees EOF then finds the lock free at once.
  lock->reset();
  nsbox::log::report_dropped();
  if (!served) {
    nsbox::log::error(served.error().message);
    return 1;
  }
  return 0;
}
