#include "runtime/client/runtime.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "isolation/cgroup.h"
#include "isolation/sys/files.h"
#include "isolation/sys/rfc3339.h"
#include "isolation/userns.h"
#include "isolation/sys/syscall.h"
#include "runtime/protocol/unix_socket.h"
#include "runtime/client/stdin_pump.h"
#include "runtime/core/sandbox_removal.h"
#include "runtime/core/sandbox_spec.h"
#include "runtime/client/supervisor_process.h"
#include "runtime/client/workspace_sources.h"
#include "runtime/links/download_link.h"

namespace nsbox {
namespace {

// The last lines of the proxy's denial log (at most 1 MiB, written by the proxy): its
// final 64 KiB, at most 20 entries.
std::vector<protocol::Json> recent_denials(const std::string& path) {
  constexpr off_t kTail = 64 * 1024;
  constexpr size_t kMaxEntries = 20;
  std::vector<protocol::Json> out;
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return out;
  off_t size = ::lseek(fd.get(), 0, SEEK_END);
  off_t from = size > kTail ? size - kTail : 0;
  std::string text(static_cast<size_t>(size - from), '\0');
  ssize_t got = ::pread(fd.get(), text.data(), text.size(), from);
  text.resize(got > 0 ? static_cast<size_t>(got) : 0);
  if (from > 0) text.erase(0, text.find('\n') + 1);  // a cut first line
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) break;
    auto line = protocol::Json::parse(text.substr(at, end - at), nullptr, false);
    if (line.is_object()) out.push_back(std::move(line));
    at = end + 1;
  }
  if (out.size() > kMaxEntries) out.erase(out.begin(), out.end() - kMaxEntries);
  return out;
}

// set_launch_hook's: a test program's, never one of the programs nsbox ships.
LaunchHook g_launch_hook = nullptr;

using protocol::Json;

// The supervisor's start without bucket mounts (milliseconds, usually); each mount adds
// what its server may take (mounts_start_bound_ms), as they start one by one.
constexpr int kSupervisorStartMs = 30000;

Error error_from_json(const Json& j) {
  const Json& e = j.contains("error") && j["error"].is_object() ? j["error"] : j;
  return make_error(error_code_from_name(e.value("code", "internal")), e.value("message", "unknown error"),
                    e.value("hint", ""));
}

Error cancelled_error(const std::string& id) {
  return make_error(ErrorCode::kUnavailable, "the wait for sandbox " + id + " was cancelled");
}


void set_receive_timeout(int fd, int timeout_ms) {
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

}  // namespace

void set_launch_hook(LaunchHook hook) { g_launch_hook = hook; }

std::string_view status_name(SandboxStatus s) {
  switch (s) {
    case SandboxStatus::kRunning: return "running";
    case SandboxStatus::kStopped: return "stopped";
    case SandboxStatus::kDead: return "dead";
  }
  return "dead";
}

Json SandboxInfo::to_json() const {
  Json j = record.to_json();
  if (volume) j["files"] = volume->to_json();
  if (home) j["home"] = home->to_json();
  j["status"] = status_name(status);
  Limits l = limits_for(record.spec.size);
  j["limits"] = {{"vcpus", l.vcpus}, {"memory_bytes", l.memory_bytes}, {"pids", l.pids},
                 {"tmp_bytes", l.tmp_bytes}, {"home_bytes", l.home_bytes}};
  if (memory_usage_bytes) j["memory_usage_bytes"] = *memory_usage_bytes;
  j["oom_kills"] = oom_kills;
  if (!kernel_state.empty()) j["kernel_state"] = kernel_state;
  if (!kernel_origin.empty()) j["kernel_origin"] = kernel_origin;
  if (!kernel_zygote_fallback.empty()) j["kernel_zygote_fallback"] = kernel_zygote_fallback;
  if (!warning.empty()) j["warning"] = warning;
  if (record.spec.net.mode == network::Mode::kAllow) j["net_denials"] = net_denials;
  return j;
}

Result<Runtime> Runtime::open(const RuntimeOptions& options) {
  auto root = NSBOX_TRY(StateRoot::resolve(options.root));
  auto layout = NSBOX_TRY(InstallLayout::discover());
  std::string snapshots = options.snapshot_dir.value_or(root.data_dir + "/snapshots");
  if (snapshots.empty() || snapshots.front() != '/')
    return fail(make_error(ErrorCode::kInvalidArgument, "--snapshot-dir must be an absolute path, not '" + snapshots + "'"));
  std::optional<RemoteSnapshotStore> remote;
  if (options.snapshot_store)
    remote = NSBOX_TRY(RemoteSnapshotStore::parse(*options.snapshot_store, process_environment(), layout.snapshot_store()));
  if (!options.shard.empty()) NSBOX_CHECK(validate_shard(options.shard));
  return Runtime(StateStore(std::move(root), options.shard), std::move(layout), std::move(snapshots), std::move(remote));
}

// Why a sandbox does not answer: stopped (`nsbox stop`), or dead (its supervisor went).
Error Runtime::not_running(const std::string& id) const {
  if (auto record = store_.load(id); record && !record->facts.stopped_at.empty() && !store_.supervisor_alive(id))
    return make_error(ErrorCode::kSandboxDead, "sandbox " + id + " is stopped", "start it with `nsbox start " + id + "`");
  return make_error(ErrorCode::kSandboxDead, "sandbox " + id + " is dead: its supervisor is gone",
                    "start it again with `nsbox start " + id + "`, or remove it with `nsbox rm " + id + "`");
}

void Runtime::remove_leftovers(const std::string& id, const std::string& name) const {
  (void)remove_mount_caches(store_.root(), id);
  (void)files::remove_tree(store_.root().sandbox_dir(id));
  store_.release_name(name, id);
}

Result<SandboxInfo> Runtime::create(const CreateOptions& given) {
  NSBOX_CHECK(store_.ensure_dirs());
  CreateOptions options = given;
  if (!options.spec.image.empty()) NSBOX_CHECK_CTX(use_image(options.spec), "create sandbox");
  const SandboxSpec& spec = options.spec;
  if (!spec.name.empty()) NSBOX_CHECK(StateStore::validate_name(spec.name));
  NSBOX_CHECK(check_env(options.launch.env));
  std::vector<std::string> mount_paths;
  for (const auto& m : spec.mounts) mount_paths.push_back(m.mount_path);
  NSBOX_CHECK(bucket::check_mount_paths(mount_paths));
  // Host sources checked and repositories cloned before anything of the sandbox is made.
  auto sources = NSBOX_TRY(WorkspaceSources::prepare(options.workspace, store_.root().cache_dir()));
  std::string id;
  for (int attempt = 0;; ++attempt) {
    id = store_.new_id();
    if (::mkdir(store_.root().sandbox_dir(id).c_str(), 0700) == 0) break;
    if (errno != EEXIST || attempt > 10) return fail(sys_error("mkdir " + store_.root().sandbox_dir(id)));
  }
  if (!spec.name.empty()) {
    if (auto r = store_.reserve_name(spec.name, id); !r) {
      remove_leftovers(id, "");
      return fail(std::move(r.error()));
    }
  }
  VolumeStore volumes(store_.root());
  // A new home starts with the home skeleton, unless a snapshot's home is restored into
  // it: that brings its own (the restore writes into an empty home).
  VolumeStore homes(store_.root(), VolumeKind::kHome, spec.from_snapshot.empty() ? layout_.home_skeleton() : "");
  auto volume = spec.volume.empty() ? volumes.create(id, false, spec.files_quota)
                                    : volumes.open_or_create_named(spec.volume, spec.files_quota);
  Result<Volume> home = fail(make_error(ErrorCode::kInternal, "no home volume"));
  if (volume) {
    auto size = spec.home_size ? Result<uint64_t>(spec.home_size) : homes.default_quota(limits_for(spec.size).home_bytes);
    home = size ? homes.create(id, false, *size) : Result<Volume>(fail(std::move(size.error())));
  }
  auto drop_volumes = [&] {
    if (volume && !volume->named) (void)volumes.remove(*volume);
    if (home) (void)homes.remove(*home);
  };
  if (!volume || !home) {
    Error e = !volume ? std::move(volume.error()) : std::move(home.error());
    drop_volumes();
    remove_leftovers(id, spec.name);
    return fail(std::move(e).context("create sandbox"));
  }
  if (!spec.from_snapshot.empty()) {
    auto restored = [&]() -> Result<void> {
      auto snapshot = NSBOX_TRY(find_snapshot(spec.from_snapshot));
      return snapshot_store().restore(snapshot, *home, *volume, /*replace=*/false);
    }();
    if (!restored) {
      drop_volumes();
      remove_leftovers(id, spec.name);
      return fail(std::move(restored.error()).context("create sandbox"));
    }
  }
  SandboxRecord record{id, spec, {}};
  record.spec.volume = volume->name;
  record.facts.home = home->name;
  record.facts.pool = options.pool;
  auto info = launch(record, options.launch);
  if (!info) {
    remove_leftovers(id, spec.name);
    drop_volumes();
    return fail(std::move(info.error()).context("create sandbox"));
  }
  if (auto written = write_workspace(id, options.workspace, sources); !written) {
    (void)remove(id);  // nothing is left of a create that failed
    return fail(std::move(written.error()).context("create sandbox"));
  }
  return info;
}

Result<SandboxInfo> Runtime::claim(const std::string& id, const std::string& name, const EnvList& env) const {
  if (!name.empty()) NSBOX_CHECK(StateStore::validate_name(name));
  NSBOX_CHECK(check_env(env));
  for (const auto& [k, v] : env)
    if (env_read_at_process_start(k))
      return fail(make_error(ErrorCode::kInvalidArgument, k + " is read when a process starts: a warm sandbox's kernel runs already",
                             "create the sandbox cold (Runtime::create)"));
  if (!name.empty()) NSBOX_CHECK(store_.reserve_name(name, id));
  Json vars = Json::object();
  for (const auto& [k, v] : env) vars[k] = v;
  auto claimed = request(id, {{"op", "claim"}, {"name", name}, {"env", vars}}, kRequestTimeoutMs);
  if (!claimed) {
    if (!name.empty()) store_.release_name(name, id);
    return fail(std::move(claimed.error()).context("claim " + id));
  }
  // The answer holds the record as saved: no second round trip for a status.
  return with_volumes(NSBOX_TRY(SandboxRecord::from_json((*claimed)["record"])));
}

// Starts the supervisor of `record` (its spec, and the facts known before it runs) with
// `envelope`, and waits for its report.
Result<SandboxInfo> Runtime::launch(const SandboxRecord& record, const LaunchEnvelope& envelope) const {
  LaunchEnvelope with_hooks = envelope;
  if (with_hooks.kernel_zygote.empty()) with_hooks.kernel_zygote = kernel_zygote_;
  // The supervisor and its tool bridge get this sandbox's link key, never the master
  // (runtime/links/download_link.h).
  if (!with_hooks.tool_keys.link_key.empty())
    with_hooks.tool_keys.link_key = links::sandbox_link_key(with_hooks.tool_keys.link_key, record.id);
  if (g_launch_hook) g_launch_hook(with_hooks);
  auto report = spawn_supervisor(layout_.supervisor(), store_.root(), {{"record", record.to_json()}, {"launch", with_hooks.to_json()}},
                                 kSupervisorStartMs + mounts_start_bound_ms(record.spec.mounts));
  with_hooks.wipe();
  if (!report || !report->value("ok", false)) {
    Error e = report ? error_from_json(*report) : report.error();
    // The supervisor removed its cgroup before exiting; wait (bounded) for its lock so
    // that nothing of the sandbox is running when we return.
    for (int i = 0; i < 500 && store_.supervisor_alive(record.id); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return fail(std::move(e));
  }
  SandboxInfo info = with_volumes(NSBOX_TRY(SandboxRecord::from_json((*report)["record"])));
  if (report->contains("warning")) {
    // Said once per state root, not at every create.
    std::string marker = store_.root().run_dir + "/.warned-limits-fallback";
    if (!files::exists(marker)) {
      info.warning = "limits fall back to rlimits: " + (*report)["warning"].get<std::string>();
      (void)files::atomic_write(marker, info.warning + "\n");
    }
  }
  return info;
}

// What a supervisor leaves when it is gone, stopped or killed: its sandbox's cgroup (a
// killed one's), its bucket mounts' caches and the files handed out by upload_local_file.
// Called with the sandbox's lock held.
Result<void> Runtime::clean_after_supervisor(const SandboxRecord& record) const {
  if (!record.facts.cgroup.dirs.empty())
    NSBOX_CHECK_CTX(cgroup::from_placement(record.facts.cgroup)->destroy(), "remove the cgroup of " + record.id);
  NSBOX_CHECK_CTX(remove_mount_caches(store_.root(), record.id), "remove the bucket mount caches of " + record.id);
  return {};
}

Result<SandboxInfo> Runtime::stop(const std::string& id_or_name) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  if (store_.supervisor_alive(id)) stop_supervisor(id);
  {
    auto lock = NSBOX_TRY(store_.lock_sandbox(id));
    auto record = NSBOX_TRY(store_.load(id));
    NSBOX_CHECK(clean_after_supervisor(record));
    SandboxFacts& facts = record.facts;
    if (facts.stopped_at.empty()) facts.stopped_at = sys::now_rfc3339();
    facts.expires_at.clear();  // no deadline runs while it is stopped: a start sets one again
    facts.supervisor_pid = 0;
    facts.init_pid = 0;
    facts.cgroup = {};
    facts.mount_servers.clear();
    facts.ports.clear();
    NSBOX_CHECK(store_.save(record));
  }
  return info_for(id);
}

Result<SandboxInfo> Runtime::start(const std::string& id_or_name, const StartOptions& options) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  NSBOX_CHECK(check_env(options.env));
  SandboxRecord record;
  LaunchEnvelope envelope{options.env, {}, {}, {}, {}, {}};
  {
    auto lock = store_.lock_sandbox(id);
    if (!lock) {
      if (lock.error().code == ErrorCode::kBusy && store_.supervisor_alive(id))
        return fail(make_error(ErrorCode::kBusy, "sandbox " + id + " is running", "`nsbox stop " + id + "` first"));
      return fail(std::move(lock.error()));
    }
    record = NSBOX_TRY(store_.load(id));
    NSBOX_CHECK(require_not_free_member(record));  // its server removes it, or the next one does
    if (record.facts.home.empty())
      return fail(make_error(ErrorCode::kInvalidArgument, "sandbox " + id + " was made before sandboxes could be started again",
                             "its files are in `nsbox files " + id + "`; make a new sandbox"));
    NSBOX_CHECK(require_env(id, record.spec.env_names, options.env));
    const auto& signed_mounts = record.facts.signed_mounts;
    for (auto& mount : record.spec.mounts) {
      // A trusted manifest's credentials go to the mount they were given for: the same in
      // every field, not merely at the same path (another endpoint would receive them).
      auto same = [&](const bucket::MountRequest& t) { return t.mount.topology() == mount.topology(); };
      auto trusted = std::find_if(options.mounts.begin(), options.mounts.end(), same);
      auto credentials = trusted != options.mounts.end() ? Result<bucket::BucketCredentials>(trusted->credentials)
                                                         : bucket::resolve(mount, options.environment);
      if (!credentials) return fail(std::move(credentials.error()).context("mount at " + mount.mount_path));
      bool was_signed = std::find(signed_mounts.begin(), signed_mounts.end(), mount.mount_path) != signed_mounts.end();
      if (was_signed && credentials->anonymous())
        return fail(make_error(ErrorCode::kInvalidArgument,
                               "the mount at " + mount.mount_path + " (" + mount.source() + ") was made with credentials, and none were given",
                               "credentials are never stored: start with them in the environment (" +
                                   bucket::credential_variables(mount.kind) + "), or in the mount's credentials file"));
      envelope.mount_credentials.push_back({mount.mount_path, std::move(*credentials)});
    }
    if (record.spec.tools.enabled()) envelope.tool_keys = NSBOX_TRY(tool_keys_from(record.spec.tools, options.environment));
    envelope.tool_keys.link_key = options.link_key;
    envelope.tool_keys.link_base_url = options.link_base_url;
    NSBOX_CHECK(clean_after_supervisor(record));
    if (!options.from_snapshot.empty()) {
      auto snapshot = NSBOX_TRY(find_snapshot(options.from_snapshot));
      auto home = NSBOX_TRY(VolumeStore(store_.root(), VolumeKind::kHome).load(record.facts.home));
      auto files = NSBOX_TRY(VolumeStore(store_.root()).load(record.spec.volume));
      NSBOX_CHECK_CTX(snapshot_store().restore(snapshot, home, files, /*replace=*/true), "start " + id);
    }
  }  // the new supervisor takes the lock
  auto info = launch(record, envelope);
  envelope.wipe();
  return info;
}

Result<Json> Runtime::request(const std::string& id, const Json& message, int timeout_ms) const {
  auto sock = protocol::connect_unix(store_.root().socket_path(id));
  if (!sock) return fail(not_running(id));
  set_receive_timeout(sock->get(), timeout_ms);
  NSBOX_CHECK(protocol::send_frame(sock->get(), message));
  auto frame = protocol::recv_frame(sock->get(), protocol::kMaxClientFrame);
  if (!frame) {
    if (frame.error().sys_errno == EAGAIN)
      return fail(make_error(ErrorCode::kTimeout, "sandbox " + id + " did not answer within " +
                                                      std::to_string(timeout_ms / 1000) + " s"));
    return fail(std::move(frame.error()));
  }
  if (!*frame) return fail(not_running(id));
  if (!(*frame)->message.value("ok", false)) return fail(error_from_json((*frame)->message));
  return std::move((*frame)->message);
}

Result<void> Runtime::tool_calls(const std::string& id_or_name, const std::function<bool(const Json&)>& on_call,
                                 const CallControl& control) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  if (!store_.supervisor_alive(id)) return fail(not_running(id));
  auto sock = protocol::connect_unix(store_.root().socket_path(id));
  if (!sock) return fail(not_running(id));
  NSBOX_CHECK(protocol::send_frame(sock->get(), {{"op", "tool_events"}}));
  for (bool subscribed = false;;) {
    pollfd p[2] = {{sock->get(), POLLIN, 0}, {control.cancel_fd, POLLIN, 0}};
    int timeout = subscribed ? -1 : kRequestTimeoutMs;
    int n = sys::retry_eintr([&] { return ::poll(p, 2, timeout); });
    if (n < 0) return fail(sys_error("poll"));
    if (n == 0) return fail(make_error(ErrorCode::kTimeout, "sandbox " + id + " did not answer the subscription"));
    if (p[1].revents) return {};  // the caller stopped listening
    auto frame = protocol::recv_frame(sock->get(), protocol::kMaxClientFrame);
    if (!frame) return fail(std::move(frame.error()).context("wait for tool calls"));
    if (!*frame) return fail(not_running(id));
    const Json& m = (*frame)->message;
    if (!subscribed) {
      if (!m.value("ok", false)) return fail(error_from_json(m));
      subscribed = true;
      if (control.on_started) control.on_started(0);
      continue;
    }
    if (m.value("event", "") == "tool_call" && !on_call(m)) return {};
  }
}

Result<void> Runtime::answer_tool_call(const std::string& id_or_name, const std::string& call_id, const Json& result,
                                       const Json& error) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  NSBOX_CHECK(request(id, {{"op", "tool_answer"}, {"call_id", call_id}, {"result", result}, {"error", error}}, kRequestTimeoutMs));
  return {};
}

// A record with its files and home volumes (either may be gone: a dead sandbox's).
SandboxInfo Runtime::with_volumes(SandboxRecord record) const {
  SandboxInfo info;
  info.record = std::move(record);
  if (auto v = VolumeStore(store_.root()).load(info.record.spec.volume)) info.volume = std::move(*v);
  if (auto h = VolumeStore(store_.root(), VolumeKind::kHome).load(info.record.facts.home)) info.home = std::move(*h);
  return info;
}

Result<SandboxInfo> Runtime::info_for(const std::string& id) const {
  SandboxInfo info = with_volumes(NSBOX_TRY(store_.load(id)));
  info.status = store_.supervisor_alive(id)           ? SandboxStatus::kRunning
                : !info.record.facts.stopped_at.empty() ? SandboxStatus::kStopped
                                                  : SandboxStatus::kDead;
  if (info.status == SandboxStatus::kRunning) {
    if (auto status = request(id, {{"op", "status"}}, 2000)) {
      if (status->contains("memory_usage_bytes")) info.memory_usage_bytes = (*status)["memory_usage_bytes"].get<uint64_t>();
      info.oom_kills = status->value("oom_kills", uint64_t{0});
      if (auto k = status->find("kernel"); k != status->end() && k->is_object()) {
        info.kernel_state = k->value("state", "");
        info.kernel_origin = k->value("origin", "");
        info.kernel_zygote_fallback = k->value("zygote_fallback", "");
      }
    } else if (status.error().code == ErrorCode::kSandboxDead) {
      info.status = SandboxStatus::kDead;
    }
  }
  return info;
}

Result<std::vector<SandboxInfo>> Runtime::list() const {
  std::vector<SandboxInfo> out;
  if (!files::exists(store_.root().run_dir + "/sandboxes")) return out;
  for (const auto& id : NSBOX_TRY(store_.ids()))
    if (auto info = info_for(id)) out.push_back(std::move(*info));
  return out;
}

Result<SandboxInfo> Runtime::inspect(const std::string& id_or_name) const {
  SandboxInfo info = NSBOX_TRY(info_for(NSBOX_TRY(store_.resolve(id_or_name))));
  if (info.record.spec.net.mode == network::Mode::kAllow) info.net_denials = recent_denials(store_.root().net_denials(info.record.id));
  return info;
}

Result<CommandResult> Runtime::exec(const std::string& id_or_name, const CommandRequest& request,
                                    const OutputCallback& on_output, int stdin_fd, const CallControl& control) const {
  NSBOX_CHECK(request.check());
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  if (!store_.supervisor_alive(id)) return fail(not_running(id));
  auto sock = protocol::connect_unix(store_.root().socket_path(id));
  if (!sock) return fail(not_running(id));
  // Bounds a supervisor that stops mid-message; the deadline below bounds one that is silent.
  set_receive_timeout(sock->get(), kRequestTimeoutMs);
  std::optional<StdinPump> pump;
  if (stdin_fd >= 0) pump = NSBOX_TRY(StdinPump::open(stdin_fd));
  Json message = request.to_json();
  message["op"] = "exec";
  message["stream"] = static_cast<bool>(on_output) || static_cast<bool>(control.on_started);
  std::vector<int> fds;
  if (pump) {
    message["stdin"] = true;
    fds.push_back(pump->sandbox_end());
  }
  NSBOX_CHECK(protocol::send_frame(sock->get(), message, fds));
  if (pump) pump->release_sandbox_end();

  // The supervisor enforces the command's deadline; this only bounds one that hangs.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(request.timeout_s * 1000) + 30000);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return fail(make_error(ErrorCode::kTimeout, "sandbox " + id + " did not report the command's end"));
    pollfd p[4] = {{sock->get(), POLLIN, 0}, pump ? pump->source_poll() : pollfd{-1, 0, 0}, pump ? pump->sink_poll() : pollfd{-1, 0, 0},
                   {control.cancel_fd, POLLIN, 0}};
    if (sys::retry_eintr([&] { return ::poll(p, 4, static_cast<int>(left)); }) < 0) return fail(sys_error("poll"));
    if (p[3].revents) return fail(cancelled_error(id));
    if (pump) pump->pump(p[1].revents, p[2].revents);
    if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    auto frame = protocol::recv_frame(sock->get(), protocol::kMaxClientFrame);
    if (!frame) return fail(std::move(frame.error()).context("wait for the command"));
    if (!*frame) return fail(not_running(id));
    const Json& m = (*frame)->message;
    try {
      if (m.value("event", "") == "output") {
        if (on_output) on_output(m.value("stream", "") == "stdout", protocol::get_bytes(m));
        continue;
      }
      if (m.value("event", "") == "started") {
        if (control.on_started) control.on_started(m.value("exec_id", uint64_t{0}));
        continue;
      }
      if (!m.contains("ok")) continue;
      if (pump) pump->stop();
      if (!m["ok"].get<bool>()) return fail(error_from_json(m));
      return CommandResult::from_json(m.value("result", Json::object()));
    } catch (const Json::exception& e) {
      return fail(make_error(ErrorCode::kProtocol, std::string("malformed answer from the supervisor: ") + e.what()));
    }
  }
}

Result<CellResult> Runtime::execute(const std::string& id_or_name, const CellOptions& cell, const OutputCallback& on_output,
                                    const ProgressCallback& on_progress, const CallControl& control) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  if (!store_.supervisor_alive(id)) return fail(not_running(id));
  auto sock = protocol::connect_unix(store_.root().socket_path(id));
  if (!sock) return fail(not_running(id));
  set_receive_timeout(sock->get(), kRequestTimeoutMs);
  Json message = {{"op", "execute"}, {"timeout_s", cell.timeout_s}, {"output_limit", cell.output_limit},
                  {"output_dir", cell.output_dir},
                  {"stream", static_cast<bool>(on_output) || static_cast<bool>(on_progress) || static_cast<bool>(control.on_started)}};
  if (protocol::is_valid_utf8(cell.code)) message["code"] = cell.code;
  else message["code_b64"] = protocol::base64_encode(cell.code);
  NSBOX_CHECK(protocol::send_frame(sock->get(), message));
  // Cells queue: the wait is for those ahead too. Bounded only by a silent supervisor:
  // every cell has its own deadline there.
  for (;;) {
    pollfd p[2] = {{sock->get(), POLLIN, 0}, {control.cancel_fd, POLLIN, 0}};
    int ready = sys::retry_eintr([&] { return ::poll(p, 2, 24 * 3600 * 1000); });
    if (ready == 0) return fail(make_error(ErrorCode::kTimeout, "sandbox " + id + " did not answer for a day"));
    if (p[1].revents) return fail(cancelled_error(id));
    auto frame = protocol::recv_frame(sock->get(), protocol::kMaxClientFrame);
    if (!frame) return fail(std::move(frame.error()).context("wait for the cell"));
    if (!*frame) return fail(not_running(id));
    const Json& m = (*frame)->message;
    try {
      std::string event = m.value("event", "");
      if (event == "output") {
        if (on_output) on_output(m.value("stream", "") == "stdout", protocol::get_bytes(m));
        continue;
      }
      if (event == "started") {
        if (control.on_started) control.on_started(m.value("cell", uint64_t{0}));
        continue;
      }
      if (event == "progress") {
        if (on_progress)
          on_progress(m.value("current_step", ""),
                      m.contains("current_step_metric") && m["current_step_metric"].is_string() ? m["current_step_metric"].get<std::string>() : "");
        continue;
      }
      if (!m.contains("ok")) continue;
      if (!m["ok"].get<bool>()) return fail(error_from_json(m));
      CellResult r;
      r.raw = m.value("result", Json::object());
      r.status = r.raw.value("status", "error");
      r.state_lost = r.raw.value("state_lost", false);
      return r;
    } catch (const Json::exception& e) {
      return fail(make_error(ErrorCode::kProtocol, std::string("malformed answer from the supervisor: ") + e.what()));
    }
  }
}

Result<void> Runtime::interrupt(const std::string& id_or_name) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  NSBOX_CHECK(request(id, {{"op", "interrupt"}}, kRequestTimeoutMs));
  return {};
}

Result<void> Runtime::restart(const std::string& id_or_name) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  NSBOX_CHECK(request(id, {{"op", "restart"}}, kRequestTimeoutMs));
  return {};
}

Result<SandboxInfo> Runtime::resize(const std::string& id_or_name, SizeTier size) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  if (!store_.supervisor_alive(id)) return fail(not_running(id));
  NSBOX_CHECK(request(id, {{"op", "resize"}, {"size", size_tier_name(size)}}, kRequestTimeoutMs));
  return info_for(id);
}

Result<SandboxInfo> Runtime::set_allowlist(const std::string& id_or_name, const net::AllowList& allow) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  if (!store_.supervisor_alive(id)) return fail(not_running(id));
  NSBOX_CHECK(request(id, {{"op", "net"}, {"allow", allow.to_json()}}, kRequestTimeoutMs));
  return inspect(id);
}

Result<SandboxInfo> Runtime::set_ttl(const std::string& id_or_name, uint64_t ttl_s) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  if (!store_.supervisor_alive(id)) return fail(not_running(id));
  NSBOX_CHECK(request(id, {{"op", "ttl"}, {"ttl_s", ttl_s}}, kRequestTimeoutMs));
  return inspect(id);
}

Result<ExposedPort> Runtime::expose_port(const std::string& id_or_name, uint16_t port, const std::string& host,
                                         uint16_t host_port) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  if (!store_.supervisor_alive(id)) return fail(not_running(id));
  Json answer = NSBOX_TRY(request(id, {{"op", "port_open"}, {"port", port}, {"host", host}, {"host_port", host_port}},
                                  kRequestTimeoutMs));
  try {
    return ExposedPort::from_json(answer.at("forward"));
  } catch (const Json::exception& e) {
    return fail(make_error(ErrorCode::kProtocol, std::string("the supervisor's port forward: ") + e.what()));
  }
}

Result<bool> Runtime::close_port(const std::string& id_or_name, uint16_t port) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  if (!store_.supervisor_alive(id)) return fail(not_running(id));
  Json answer = NSBOX_TRY(request(id, {{"op", "port_close"}, {"port", port}}, kRequestTimeoutMs));
  return answer.value("closed", false);
}

void Runtime::stop_supervisor(const std::string& id) const {
  auto sock = protocol::connect_unix(store_.root().socket_path(id));
  if (sock) {
    set_receive_timeout(sock->get(), kRequestTimeoutMs);
    if (protocol::send_frame(sock->get(), {{"op", "shutdown"}})) {
      // The answer, then EOF: the supervisor answers, then exits, and its exit closes the
      // socket after its lock (a lower fd), so EOF means the lock is free.
      for (int frames = 0; frames < 2; ++frames) {
        auto frame = protocol::recv_frame(sock->get(), protocol::kMaxClientFrame);
        if (!frame || !*frame) break;
      }
    }
  }
  // Bounded (~1 s), for a supervisor that is exiting.
  auto pause = std::chrono::microseconds(100);
  for (int i = 0; i < 20 && store_.supervisor_alive(id); ++i) {
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(100000));
  }
  if (store_.supervisor_alive(id)) kill_supervisor(id);
}

// A supervisor that did not stop when asked (wedged, or stuck on a remote) is killed:
// removal must always win. Its sandbox dies with it (init has PR_SET_PDEATHSIG; the
// caller then removes the cgroup, which kills anything left), and so do its bucket
// servers; its mounts were in its own mount namespace.
void Runtime::kill_supervisor(const std::string& id) const {
  auto record = store_.load(id);
  if (!record || record->facts.supervisor_pid <= 0) return;
  // The pid is the supervisor's only while it lives: open a pidfd, then check that the
  // supervisor's lock is still held. Only the supervisor holds it (its children get none
  // of its fds), so if it is held now, the process behind the pidfd is the supervisor.
  UniqueFd pidfd(sys::pidfd_open(record->facts.supervisor_pid, 0));
  if (!pidfd || !store_.supervisor_alive(id)) return;
  if (::syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0) != 0) return;
  pollfd p{pidfd.get(), POLLIN, 0};
  (void)sys::retry_eintr([&] { return ::poll(&p, 1, 5000); });
  for (int i = 0; i < 100 && store_.supervisor_alive(id); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

Result<void> Runtime::remove(const std::string& id_or_name, bool keep_files) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  if (store_.supervisor_alive(id)) stop_supervisor(id);
  auto lock = NSBOX_TRY(store_.lock_sandbox(id));
  auto record = store_.load(id);
  if (record) NSBOX_CHECK(clean_after_supervisor(*record));
  return remove_sandbox_files(store_, id, record, keep_files);
}

Result<FilesVolume> Runtime::files(const std::string& id_or_name) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  auto record = NSBOX_TRY(store_.load(id));
  NSBOX_CHECK(require_not_free_member(record));
  auto volume = NSBOX_TRY(VolumeStore(store_.root()).load(record.spec.volume));
  return VolumeStore(store_.root()).open_files(volume);
}

Result<SandboxFs> Runtime::sandbox_fs(const std::string& id_or_name, const std::string& run_as) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  auto record = NSBOX_TRY(store_.load(id));
  NSBOX_CHECK(require_not_free_member(record));
  Identity who = NSBOX_TRY(record.spec.accounts.identity(run_as));
  if (record.facts.init_pid <= 0 || !store_.supervisor_alive(id)) return fail(not_running(id));
  // The root is init's, and init is the sandbox's only while the supervisor lives: a pidfd
  // first, the supervisor's lock checked after it, the root opened, and init still alive
  // after that (so /proc/<pid> was still this process when the root was opened).
  UniqueFd pidfd(sys::pidfd_open(record.facts.init_pid, 0));
  if (!pidfd || !store_.supervisor_alive(id)) return fail(not_running(id));
  std::string proc_root = "/proc/" + std::to_string(record.facts.init_pid) + "/root";
  UniqueFd root(::open(proc_root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root) return fail(sys_error("open the root of sandbox " + id + " (" + proc_root + ")"));
  // Rootless, another account's host id is a subordinate one: its calls go through the
  // sandbox's user namespace (SandboxFs::in_namespace). So do the sandbox user's, in a
  // sandbox with accounts: its init dropped the invoking user's groups, which this
  // process has.
  UniqueFd userns;
  bool through_namespace = ::geteuid() != 0 && (who.uid != userns::kSandboxUid || !record.spec.accounts.empty());
  if (through_namespace) {
    std::string proc_ns = "/proc/" + std::to_string(record.facts.init_pid) + "/ns/user";
    userns.reset(::open(proc_ns.c_str(), O_RDONLY | O_CLOEXEC));
    if (!userns) return fail(sys_error("open the user namespace of sandbox " + id + " (" + proc_ns + ")"));
  }
  pollfd exited{pidfd.get(), POLLIN, 0};
  if (::poll(&exited, 1, 0) != 0) return fail(not_running(id));
  const std::string account = who.name == "user" ? "the sandbox user" : who.name;  // as a refusal names it
  if (through_namespace)
    return SandboxFs::in_namespace(std::move(root), std::move(userns), who.uid, who.gid, record.spec.workspace_root, account);
  // Each account's own host ids (isolation/userns.h): what it may not touch, nor may we.
  auto ids = userns::host_ids();
  return SandboxFs(std::move(root), userns::host_uid(ids, who.uid), userns::host_gid(ids, who.gid), record.spec.workspace_root,
                   account);
}

// A create's manifest entries, made in /home/user as the sandbox user before the sandbox
// is handed over.
Result<void> Runtime::write_workspace(const std::string& id, const std::vector<WorkspaceEntry>& entries,
                                      const WorkspaceSources& sources) const {
  if (entries.empty()) return {};
  return sources.write(NSBOX_TRY(sandbox_fs(id)), entries);
}

Result<std::vector<Volume>> Runtime::volumes() const { return VolumeStore(store_.root()).list(); }

images::ImageStore Runtime::images() const {
  return images::ImageStore(store_.root().data_dir, layout_.archiver(), userns::host_ids());
}

// The image a create names, resolved to its id, its Env recorded. Cells there need the
// image's own Python (a kernel not built yet): the sandbox starts none.
Result<void> Runtime::use_image(SandboxSpec& spec) const {
  // Every image file is the sandbox user's (docs/images.md): with accounts, user could
  // plant what the others run (/etc/profile, /bin/sh).
  if (!spec.accounts.empty())
    return fail(make_error(ErrorCode::kUnsupported, "a sandbox made from an image cannot have accounts of its own yet",
                           "its files all belong to the sandbox user, who could change what the accounts run"));
  auto image = NSBOX_TRY(images().resolve(spec.image));
  spec.image = image.id;
  spec.image_env = image.config.env;
  spec.lazy_kernel = true;
  return {};
}

Result<images::ImageRecord> Runtime::remove_image(const std::string& ref) const {
  auto store = images();
  auto image = NSBOX_TRY(store.resolve(ref));
  NSBOX_CHECK(store_.ensure_dirs());
  for (const auto& id : NSBOX_TRY(store_.ids()))
    if (auto record = store_.load(id); record && record->spec.image == image.id)
      return fail(make_error(ErrorCode::kBusy, "image " + image.id.substr(0, 12) + " is the root of sandbox " + id, "remove the sandbox first"));
  return store.remove(image.id);
}

Result<void> Runtime::remove_volume(const std::string& name) const {
  VolumeStore volumes(store_.root());
  auto volume = NSBOX_TRY(volumes.load(name));
  if (!volume.named)
    return fail(make_error(ErrorCode::kInvalidArgument, "volume '" + name + "' belongs to sandbox " + name,
                           "it goes with `nsbox rm " + name + "`"));
  if (files::exists(store_.root().run_dir + "/sandboxes"))
    for (const auto& id : NSBOX_TRY(store_.ids()))
      if (auto r = store_.load(id); r && r->spec.volume == name)
        return fail(make_error(ErrorCode::kBusy, "volume '" + name + "' is used by sandbox " + id, "remove the sandbox first"));
  return volumes.remove(volume);
}

}  // namespace nsbox
