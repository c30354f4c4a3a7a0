// The C++ API of nsbox: everything the CLI (and an embedding agent framework) can do.
//
//   auto rt = nsbox::Runtime::open({});
//   auto sb = rt->create({.spec = {.name = "etl", .size = nsbox::SizeTier::kLarge}});
//   auto r  = rt->exec("etl", {.argv = {"python3", "-c", "print(1)"}}, on_output);
//   rt->remove("etl");
//
// Sandboxes outlive the process that created them: each has its own supervisor.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "isolation/network.h"
#include "isolation/size_tier.h"
#include "runtime/core/command.h"
#include "runtime/client/create_options.h"
#include "runtime/core/install_layout.h"
#include "runtime/core/sandbox_spec.h"
#include "runtime/client/sandbox_fs.h"
#include "runtime/images/image_store.h"
#include "runtime/client/snapshot_store.h"
#include "runtime/core/state_store.h"
#include "runtime/core/volume_store.h"
#include "mounts/bucket/mount_spec.h"

namespace nsbox {

class WorkspaceSources;

struct RuntimeOptions {
  std::optional<std::string> root;  // --root / NSBOX_ROOT
  std::optional<std::string> snapshot_dir;  // --snapshot-dir; default <data>/snapshots
  // --snapshot-store s3://BUCKET/PREFIX: snapshots in a bucket (the dir then only stages
  // them); its credentials from this process's environment.
  std::optional<std::string> snapshot_store;
  // `nsbox serve --shard`: the ids this runtime makes carry it (runtime/core/state_store.h).
  std::string shard;
};

// Running; stopped by `stop` (start brings it back); dead: its supervisor went without
// a stop (killed, or the sandbox's init died). Stopped and dead sandboxes can be started.
enum class SandboxStatus { kRunning, kStopped, kDead };
std::string_view status_name(SandboxStatus s);

struct SandboxInfo {
  SandboxRecord record;
  std::optional<Volume> volume;
  std::optional<Volume> home;
  SandboxStatus status = SandboxStatus::kRunning;
  std::optional<uint64_t> memory_usage_bytes;
  uint64_t oom_kills = 0;
  std::string kernel_state;  // running: its kernel's (stopped, starting, idle, busy)
  // Running: where its last kernel came from, "zygote" (forked by the server's kernel
  // zygote) or "init" (exec'd by the sandbox's init); "" before its first. With a zygote
  // given and init's kernel, why the zygote's was not used.
  std::string kernel_origin;
  std::string kernel_zygote_fallback;
  std::string warning;  // e.g. limits fall back to rlimits (given once per state root)
  // The egress proxy's last refusals, oldest first ({"time", "host", "port", "status",
  // "reason"}); inspect only.
  std::vector<nlohmann::json> net_denials;

  nlohmann::json to_json() const;
};

// Receives a command's output as it arrives.
using OutputCallback = std::function<void(bool is_stdout, std::string_view bytes)>;

// For servers: a call that waits on a sandbox can be stopped from another thread, and
// tells when its cell or command has started.
struct CallControl {
  // Readable: stop waiting and return `unavailable`. The call's connection to the
  // supervisor closes, which kills a command and interrupts a cell (its state kept).
  int cancel_fd = -1;
  std::function<void(uint64_t number)> on_started;  // the command's exec id, the cell's number
};

// A cell of Python for the sandbox's kernel (`nsbox exec`).
struct CellOptions {
  std::string code;  // bytes; need not be valid UTF-8 (then the result is a SyntaxError)
  double timeout_s = kDefaultTimeoutS;
  size_t output_limit = 64 << 10;  // per stream inline; the rest goes to a file
  std::string output_dir = kOutputDir;  // that file's directory in /mnt/files (runtime/core/command.h)
};

// Everything a cell reports (docs/semantics.md, "Cells"); `raw` holds every field.
struct CellResult {
  std::string status;  // ok | error | timeout | interrupted | killed
  bool state_lost = false;
  protocol::Json raw;
};

// Progress reported by set_progress(current_step, current_step_metric) in a cell.
using ProgressCallback = std::function<void(const std::string& step, const std::string& metric)>;

// PTY sessions (docs/semantics.md, "PTY sessions").
struct PtyStart {
  std::vector<std::string> argv;
  unsigned cols = 80, rows = 24;
  EnvList env;
  std::string cwd;  // "": the sandbox's workspace root
  std::string run_as;  // one of the sandbox's accounts; "": user
};

// Processes that outlive a request (docs/semantics.md, "Processes"), named by their pid
// in the sandbox.
struct ProcessStart {
  std::vector<std::string> argv;
  EnvList env;
  std::string cwd;  // "": the sandbox's workspace root
  std::string run_as;  // one of the sandbox's accounts; "": user
  bool tty = false;
  unsigned cols = 80, rows = 24;
};
struct ProcessRead {
  uint64_t offset = 0, stderr_offset = 0;  // of each stream, in bytes
  uint64_t wait_ms = 0;                    // for bytes past them, or the exit (at most 30000)
  uint64_t max_bytes = 0;                  // per stream; 0: the most (256 KiB)
};
// What a session printed since the last answer; `exit_code` once its command exited.
struct PtyOutput {
  uint64_t session_id = 0;
  std::string output;  // bytes
  std::optional<int> exit_code;
  uint64_t dropped = 0;  // bytes lost to the 1 MiB bound on unread output
  protocol::Json to_json() const;
};

// What `resume` needs besides a state (docs/semantics.md, "Resume"). From a trusted
// manifest: the mounts with their credentials (`start.mounts`), its environment in
// `start.env`, and its ephemeral entries, made again when the sandbox is recreated.
struct ResumeOptions {
  StartOptions start;
  bool trusted_manifest = false;  // start.mounts came from one: their topology must be the state's
  std::vector<WorkspaceEntry> ephemeral_entries;
  std::vector<std::string> ephemeral;  // their paths
  std::string manifest_digest;  // the trusted manifest's: a different one than the snapshot's restores
};

struct ResumeResult {
  SandboxInfo info;
  // reattached (it runs), started (stopped or dead, its workspace already the snapshot's
  // or no snapshot), restored (started from the snapshot), recreated (gone: a new
  // sandbox from the snapshot)
  std::string action;
  std::string snapshot;  // the state's snapshot, if any
  protocol::Json to_json() const;
};

struct RunOptions {
  SizeTier size = SizeTier::kStandard;
  network::Mode net = network::Mode::kNone;
  EnvList env;
  CommandRequest command;
  int stdin_fd = -1;  // handed to the command, or /dev/null when -1
  // With an output callback the output is captured through pipes; without one, the
  // command writes straight to stdout_fd/stderr_fd (as bwrap does).
  OutputCallback on_output;
  int stdout_fd = 1;
  int stderr_fd = 2;
};

// A function a test program gives to change every supervisor's launch envelope before it
// is handed over, in the process that creates or starts the sandbox: the test hooks of
// tests/support/nsbox_with_test_hooks.cc (names the egress proxy answers without DNS, a
// network namespace for the host-side network helpers, a zygote's socket). The programs
// nsbox ships set none: nothing of a test reaches the product through its environment.
using LaunchHook = void (*)(LaunchEnvelope& launch);
void set_launch_hook(LaunchHook hook);

class Runtime {
 public:
  static Result<Runtime> open(const RuntimeOptions& options);

  // `nsbox serve --kernel-zygote`: the supervisors started from now on fork their kernels
  // from the zygote listening on `socket` (kernel/zygote_keeper/kernel_zygote_process.h); "" stops it.
  void use_kernel_zygote(std::string socket) { kernel_zygote_ = std::move(socket); }
  const InstallLayout& layout() const { return layout_; }

  Result<SandboxInfo> create(const CreateOptions& options);
  // Makes a warm pool's free member (made by create with `pool` set) the caller's: its
  // name (reserved here) and env, fresh random state in its kernel, its size's CPU
  // weight. kBusy when it is not a free member (claimed already, or gone);
  // kInvalidArgument for a bad name or env, or a variable read at process start
  // (env_read_at_process_start): the member is then untouched.
  Result<SandboxInfo> claim(const std::string& id, const std::string& name, const EnvList& env) const;
  Result<std::vector<SandboxInfo>> list() const;
  Result<SandboxInfo> inspect(const std::string& id_or_name) const;
  // `inspect --state`: what resuming the sandbox needs, serialisable and without a secret
  // (no env value, no credential, no host path): id, name, size, network, env names,
  // credential-free mounts, packages, and its newest snapshot with its fingerprint.
  Result<protocol::Json> state(const std::string& id_or_name) const;
  // Brings a state's sandbox back: reattaches when it runs; starts it when stopped or dead
  // (restoring its snapshot unless the live workspace's fingerprint is the snapshot's);
  // recreates it from its snapshot when gone. A trusted manifest's mounts must have the
  // state's credential-free topology exactly; nothing starts otherwise.
  Result<ResumeResult> resume(const protocol::Json& state, const ResumeOptions& options);
  // Runs a command; output goes to `on_output` as it arrives. `stdin_fd` (-1: none) is
  // passed to the command.
  Result<CommandResult> exec(const std::string& id_or_name, const CommandRequest& request,
                             const OutputCallback& on_output, int stdin_fd = -1, const CallControl& control = {}) const;
  // Runs a cell in the sandbox's kernel. Cells run one at a time, in the order they come.
  // With callbacks, output and progress arrive while the cell runs.
  Result<CellResult> execute(const std::string& id_or_name, const CellOptions& cell, const OutputCallback& on_output = {},
                             const ProgressCallback& on_progress = {}, const CallControl& control = {}) const;
  Result<void> interrupt(const std::string& id_or_name) const;  // the running cell
  Result<void> restart(const std::string& id_or_name) const;    // a fresh interpreter
  Result<SandboxInfo> resize(const std::string& id_or_name, SizeTier size) const;
  // Replaces the allowlist of a `--net allow=` sandbox, live (docs/network.md).
  Result<SandboxInfo> set_allowlist(const std::string& id_or_name, const net::AllowList& allow) const;
  // The running sandbox is removed `ttl_s` seconds from now (docs/semantics.md, "Time to
  // live"): a TTL's extension, or a first one.
  Result<SandboxInfo> set_ttl(const std::string& id_or_name, uint64_t ttl_s) const;
  // Port forwards of the running sandbox (docs/semantics.md, "Ports"): its 127.0.0.1:`port`
  // reachable at a loopback address of the host (`host` "": 127.0.0.1; `host_port` 0: a
  // free one). Asked again, the same forward. The forwards are the record's `ports`.
  Result<ExposedPort> expose_port(const std::string& id_or_name, uint16_t port, const std::string& host = "",
                                  uint16_t host_port = 0) const;
  Result<bool> close_port(const std::string& id_or_name, uint16_t port) const;  // false: it was not forwarded
  // Ends every process of the sandbox (its kernel's state is lost) and its supervisor; the
  // sandbox stays, `stopped`, with its files and home volumes and its definition.
  // Stopping a stopped sandbox does nothing; a dead one is cleaned up and marked stopped.
  Result<SandboxInfo> stop(const std::string& id_or_name) const;
  // Starts a stopped (or dead) sandbox again: same id, name, size, network policy,
  // packages, tools and mounts, a fresh kernel. Env values, mount credentials and tool
  // keys were never stored: they come from `options` as at create, and every variable
  // the sandbox was created with must be given again.
  Result<SandboxInfo> start(const std::string& id_or_name, const StartOptions& options) const;
  // Stops the sandbox if it runs, removes its cgroup, state, home volume and files volume
  // (kept, as a named volume of the sandbox's id, with `keep_files`).
  Result<void> remove(const std::string& id_or_name, bool keep_files = false) const;

  // The files API: the sandbox's /mnt/files, from the host side, whether the sandbox runs,
  // is running a cell, or is dead.
  Result<FilesVolume> files(const std::string& id_or_name) const;
  // The sandbox's own view of its files with the rights of `run_as` ("": user):
  // /home/user, /tmp, /mnt/files, bucket mounts. The sandbox must be running.
  Result<SandboxFs> sandbox_fs(const std::string& id_or_name, const std::string& run_as = "") const;
  // The callback backend of the tool bridge (docs/tools.md): hands each tool call of the
  // sandbox to `on_call` ({"event": "tool_call", "call_id", "cell", "helper", "args"}) as it
  // is made, until `control.cancel_fd` is readable, the sandbox goes (an error), or
  // `on_call` returns false. A later subscriber takes over from this one.
  Result<void> tool_calls(const std::string& id_or_name, const std::function<bool(const protocol::Json&)>& on_call,
                          const CallControl& control = {}) const;
  // The answer to one of them (`error` a string, or null for `result`).
  Result<void> answer_tool_call(const std::string& id_or_name, const std::string& call_id, const protocol::Json& result,
                                const protocol::Json& error) const;
  // Snapshots (docs/semantics.md, "Snapshots"): /home/user (and /mnt/files with
  // `include_files`) of a running, stopped or dead sandbox, without its bucket mounts.
  Result<SnapshotInfo> snapshot(const std::string& id_or_name, const std::string& name, bool include_files) const;
  Result<std::vector<SnapshotInfo>> snapshots() const;
  Result<SnapshotInfo> find_snapshot(const std::string& id_or_name) const;
  Result<void> remove_snapshot(const std::string& id_or_name) const;
  // Sharded serve (docs/semantics.md): where a sandbox went, and a drain's tombstone.
  Result<SandboxPointer> sandbox_pointer(const std::string& id) const { return snapshot_store().pointer(id); }
  Result<void> mark_moved(const std::string& id, const std::string& snapshot) const { return snapshot_store().mark_moved(id, snapshot); }
  // Unpacks a caller's tar or zip archive (a file open at `archive_fd`) into `dir` of the
  // running sandbox, made if missing (docs/api.md, "fs:extract"): the whole archive
  // checked first (no absolute path, `..`, link out, hard link, device, duplicate; at most
  // `max_members` and `max_bytes`), then unpacked as the sandbox user, never over a file
  // that exists. {"members", "bytes"}.
  // `replace`: the archive becomes `dir`'s whole content (docs/api.md, "Workspace archives").
  // `run_as`: staged, unpacked and owned as that account ("": user).
  Result<protocol::Json> extract(const std::string& id_or_name, const std::string& dir, int archive_fd, bool zip,
                                 uint64_t max_members, uint64_t max_bytes, bool replace = false,
                                 const std::string& run_as = "") const;
  // The workspace root of a running, stopped or dead sandbox as a tar stream into `out_fd`
  // (a pipe: read it from another thread), without its bucket mounts and ephemeral entries;
  // links kept as links, nothing outside the root (docs/api.md, "Workspace archives").
  // {"members", "bytes", "skipped", "left_out"}.
  Result<protocol::Json> workspace_archive(const std::string& id_or_name, int out_fd) const;
  // The workspace root of a running sandbox replaced by a tar archive open at `archive_fd`.
  Result<protocol::Json> replace_workspace(const std::string& id_or_name, int archive_fd) const;
  Result<uint64_t> pty_start(const std::string& id_or_name, const PtyStart& start) const;
  // Writes `chars` (bytes; "\x03" is Ctrl-C), then answers with what the session printed
  // within `yield_ms` (sooner if it exits). pty_read is the same without writing.
  Result<PtyOutput> pty_write(const std::string& id_or_name, uint64_t session, const std::string& chars, uint64_t yield_ms) const;
  // With `early`, answers as soon as there is output (interactive use: `sh --tty`).
  Result<PtyOutput> pty_read(const std::string& id_or_name, uint64_t session, uint64_t yield_ms, bool early = false) const;
  // Types `chars` and answers at once, leaving the output for pty_read.
  Result<void> pty_type(const std::string& id_or_name, uint64_t session, const std::string& chars) const;
  Result<void> pty_resize(const std::string& id_or_name, uint64_t session, unsigned cols, unsigned rows) const;
  // Kills a session (`session` 0: all of them); the ids killed.
  Result<std::vector<uint64_t>> pty_kill(const std::string& id_or_name, uint64_t session) const;
  // Processes: started (the answer is its pid once it runs; an exec failure is an error),
  // listed with status and exit code, read from offsets ({status, exit_code, stdout:
  // {offset, data|data_b64, skipped}, stderr: ...}), written to (`eof` closes stdin),
  // signalled (its process group), removed (killed first if it runs).
  Result<int64_t> process_start(const std::string& id_or_name, const ProcessStart& start) const;
  Result<protocol::Json> processes(const std::string& id_or_name) const;
  Result<protocol::Json> process_read(const std::string& id_or_name, int64_t pid, const ProcessRead& read) const;
  Result<protocol::Json> process_write(const std::string& id_or_name, int64_t pid, const std::string& data, bool eof) const;
  Result<protocol::Json> process_signal(const std::string& id_or_name, int64_t pid, int signal) const;
  Result<void> process_remove(const std::string& id_or_name, int64_t pid) const;
  Result<std::vector<Volume>> volumes() const;
  Result<void> remove_volume(const std::string& name) const;  // a named one, not in use
  // The state root's images (runtime/images/image_store.h, docs/images.md).
  images::ImageStore images() const;
  // An image no sandbox has as its root.
  Result<images::ImageRecord> remove_image(const std::string& ref) const;
  // create + exec + remove in one process, without a supervisor daemon. It clones the
  // calling process without exec'ing (that is what makes it fast): call it from a
  // single-threaded program, or one whose other threads hold no locks; multi-threaded
  // embedders use create + exec + remove. SIGINT, SIGTERM and SIGHUP are held while it
  // runs; one that arrives removes the sandbox and ends the command ("interrupted").
  Result<CommandResult> run(const RunOptions& options) const;

  const StateStore& store() const { return store_; }

 private:
  Result<void> use_image(SandboxSpec& spec) const;
  Runtime(StateStore store, InstallLayout layout, std::string snapshot_dir, std::optional<RemoteSnapshotStore> remote)
      : store_(std::move(store)), layout_(std::move(layout)), snapshot_dir_(std::move(snapshot_dir)), remote_(std::move(remote)) {}
  SnapshotStore snapshot_store() const { return SnapshotStore(snapshot_dir_, layout_.archiver(), remote_); }
  // How long a plain request waits for the supervisor's answer.
  static constexpr int kRequestTimeoutMs = 15000;

  Result<SandboxInfo> info_for(const std::string& id) const;
  SandboxInfo with_volumes(SandboxRecord record) const;
  Error not_running(const std::string& id) const;
  Result<protocol::Json> request(const std::string& id, const protocol::Json& message, int timeout_ms) const;
  void remove_leftovers(const std::string& id, const std::string& name) const;
  void stop_supervisor(const std::string& id) const;
  void kill_supervisor(const std::string& id) const;
  Result<SandboxInfo> launch(const SandboxRecord& record, const LaunchEnvelope& envelope) const;
  Result<void> clean_after_supervisor(const SandboxRecord& record) const;
  // What a snapshot of the sandbox leaves out of /home/user: ephemeral entries and mounts.
  static std::vector<std::string> snapshot_skips(const SandboxRecord& record);
  Result<ResumeResult> resume_checked(const protocol::Json& state, const ResumeOptions& options);
  Result<void> write_workspace(const std::string& id, const std::vector<WorkspaceEntry>& entries,
                               const WorkspaceSources& sources) const;

  StateStore store_;
  InstallLayout layout_;
  std::string snapshot_dir_;
  std::string kernel_zygote_;  // use_kernel_zygote's socket
  std::optional<RemoteSnapshotStore> remote_;
};

}  // namespace nsbox
