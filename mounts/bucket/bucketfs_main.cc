// nsbox-bucketfs: the FUSE server of one bucket mount. Started by the supervisor, on the
// host side and in the supervisor's mount namespace; the sandbox only ever sees the
// mounted directory, never this process, its environment or its credentials.
//
//   stdin:  {"mount": BucketMount, "credentials": {...}, "mountpoint": DIR,
//            "staging_dir": DIR, "uid": N, "gid": N, "log_file": PATH}   (closed after)
//   fd 3:   one JSON line once mounted ({"ok":true}) or not ({"ok":false,"error":{...}})
//   --probe: only check the bucket and report (for mounts rclone or s3fs serve)
//   stderr: the supervisor's log, until the config's "log_file" (<run>/sandboxes/<id>/
//           buckets/<N>.log, rotated at 4 MiB) is open: why a request failed,
//           rate-limited; never a secret
//   environment: PATH only
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "isolation/sys/log.h"
#include "mounts/bucket/bucket_fs.h"

namespace {

using nlohmann::json;
using namespace nsbox;
using namespace nsbox::bucket;

constexpr int kReportFd = 3;
constexpr int kMaxThreads = 16;

void report(const json& message) {
  std::string line = message.dump() + "\n";
  (void)!::write(kReportFd, line.data(), line.size());
  ::close(kReportFd);
}

int fail_start(const Error& e, const BucketCredentials& credentials) {
  report({{"ok", false},
          {"error", {{"code", error_code_name(e.code)}, {"message", redact(e.message, credentials)}, {"hint", e.hint}}}});
  return 1;
}

struct Config {
  BucketMount mount;
  BucketCredentials credentials;
  std::string mountpoint;
  std::string log_file;  // the server's own log (rotated); empty: stderr
  BucketFsOptions options;
};

Result<Config> read_config() {
  std::string input(std::istreambuf_iterator<char>(std::cin), {});
  json j = json::parse(input, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return fail(make_error(ErrorCode::kProtocol, "nsbox-bucketfs: stdin is not a JSON object"));
  Config c;
  c.mount = NSBOX_TRY(BucketMount::from_json(j["mount"]));
  c.credentials = BucketCredentials::from_json(j.value("credentials", json::object()));
  c.mountpoint = j.value("mountpoint", "");
  c.log_file = j.value("log_file", "");
  c.options = {j.value("uid", 0u), j.value("gid", 0u), c.mount.read_only, c.mount.prefix, j.value("staging_dir", "/tmp"),
               c.mount.kind == BucketKind::kAzureBlob, c.mount.staging_bytes};
  return c;
}

// The supervisor stops a server with SIGTERM (and SIGKILL 2 s later).
sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&set, sig);
  return set;
}

// What the stop signals end: the session, and the requests to the remote under way, so
// that the FUSE requests waiting on them (an upload at close) end with an error and an
// upload in parts is aborted at the remote rather than left there, within the 2 s.
BucketClient* g_client = nullptr;
fuse_session* g_session = nullptr;

void on_stop_signal(int) {
  g_client->stop();
  fuse_session_exit(g_session);
}

void handle_stop_signals(BucketClient& client, fuse_session* session) {
  g_client = &client;
  g_session = session;
  struct sigaction action{};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);  // no SA_RESTART: the loop's wait returns to see the session is over
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) ::sigaction(sig, &action, nullptr);
}

int serve(BucketFs& fs, BucketClient& client, const Config& config) {
  std::string options = "allow_other,default_permissions,noatime,fsname=nsbox-bucket:" + config.mount.bucket;
  if (config.mount.read_only) options += ",ro";
  const char* argv[] = {"nsbox-bucketfs", "-o", options.c_str()};
  fuse_args args = FUSE_ARGS_INIT(3, const_cast<char**>(argv));
  fuse_session* session = fuse_session_new(&args, &BucketFs::operations(), sizeof(fuse_lowlevel_ops), &fs);
  if (!session)
    return fail_start(make_error(ErrorCode::kInternal, "fuse_session_new failed (options: " + options + ")"), config.credentials);
  if (fuse_session_mount(session, config.mountpoint.c_str()) != 0) {
    fuse_session_destroy(session);
    return fail_start(make_error(ErrorCode::kSystem, "mount the FUSE filesystem at " + config.mountpoint), config.credentials);
  }
  handle_stop_signals(client, session);
  report({{"ok", true}});
  fuse_loop_config* loop = fuse_loop_cfg_create();
  fuse_loop_cfg_set_clone_fd(loop, 1);  // a /dev/fuse queue per worker thread
  fuse_loop_cfg_set_max_threads(loop, kMaxThreads);
  // Only this thread takes SIGTERM (main() blocked it for every thread made before): the
  // handler ends the session, but only a wait it interrupts here notices at once.
  sigset_t stop = stop_signals();
  ::pthread_sigmask(SIG_UNBLOCK, &stop, nullptr);
  int result = fuse_session_loop_mt(session, loop);
  fuse_loop_cfg_destroy(loop);
  // A descriptor the supervisor mounted (rootless: in the sandbox) is not ours to unmount:
  // closing it ends the connection, and the mount goes with the sandbox.
  if (!config.mountpoint.starts_with("/dev/fd/")) fuse_session_unmount(session);
  fuse_session_destroy(session);
  return result == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  log::set_program("nsbox-bucketfs");
  // Before the credentials are read: no core dump of a process holding keys, and no
  // ptrace or /proc/PID/mem by anyone without CAP_SYS_PTRACE.
  ::prctl(PR_SET_DUMPABLE, 0);
  // --probe: check the bucket and report, for a mount another tool serves (rclone, s3fs).
  bool probe_only = argc > 1 && std::string(argv[1]) == "--probe";
  // With the supervisor gone, nothing may keep serving: the connection aborts with us.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t stop = stop_signals();
  ::pthread_sigmask(SIG_BLOCK, &stop, nullptr);  // inherited by every thread; serve() unblocks its own
  auto config = read_config();
  if (!config) return fail_start(config.error(), {});
  // Else stderr, the supervisor's log. A log that cannot be opened is said there, and the
  // mount goes on.
  if (!config->log_file.empty())
    if (auto opened = log::open_file(config->log_file); !opened) log::warn("log to " + config->log_file + ": " + opened.error().message);
  auto client = make_client(config->mount, config->credentials);
  if (!client)
    return fail_start(make_error(ErrorCode::kUnsupported, std::string(kind_name(config->mount.kind)) + " mounts are not built in"),
                      config->credentials);
  if (auto probed = client->probe(config->mount.prefix); !probed)
    return fail_start(std::move(probed.error()).context("mount " + config->mount.describe()), config->credentials);
  if (probe_only) {
    report({{"ok", true}});
    return 0;
  }
  BucketFs fs(*client, config->options);
  // Once the session is over nothing can reach the kernel any more: no destructor runs,
  // so a read-ahead waiting on a stalled remote does not hold the exit.
  int status = serve(fs, *client, *config);
  log::report_dropped();  // what the rate limit held back, counted
  ::_exit(status);
}
