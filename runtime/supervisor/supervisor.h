// The supervisor: one per sandbox, on the host side, for the sandbox's whole life.
//
// It owns the SandboxInstance (cgroup, init, seccomp listener), listens on the sandbox's
// control socket, runs commands through init and relays their output to the client that
// asked, enforces each command's deadline, and keeps the state file current. Clients
// speak frames (runtime/protocol/frame.h); docs/protocol.md lists the requests.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "runtime/core/command.h"
#include "runtime/protocol/frame.h"
#include "runtime/core/sandbox_spec.h"
#include "runtime/core/sandbox_instance.h"
#include "runtime/core/state_store.h"
#include "runtime/core/volume_store.h"
#include "mounts/files_volume.h"
#include "runtime/core/install_layout.h"
#include "runtime/supervisor/bridge_socket.h"
#include "runtime/supervisor/bucket_servers.h"
#include "runtime/supervisor/event_loop.h"
#include "runtime/supervisor/kernel_session.h"
#include "runtime/supervisor/zygote_kernel.h"
#include "runtime/supervisor/nat_helper.h"
#include "runtime/supervisor/net_proxy.h"
#include "runtime/supervisor/output_capture.h"
#include "runtime/supervisor/port_forwards.h"
#include "runtime/supervisor/processes.h"
#include "runtime/supervisor/tool_bridge.h"

namespace nsbox {

class Supervisor final : private KernelHost, private ProcessHost {
 public:
  // Starts the sandbox, its kernel, and attaches its files volume; binds the control
  // socket; the returned record is saved. Runs in a private mount namespace (root): the
  // volume's mount is ours and the sandbox's only.
  // `record` holds the spec and the facts known before the start (its id, home volume,
  // creation time, how it was made); the rest of the facts are learned here.
  static Result<std::unique_ptr<Supervisor>> start(const StateStore& store, SandboxRecord record, LaunchEnvelope launch,
                                                   const InstallLayout& layout);
  const SandboxRecord& record() const { return record_; }
  const std::string& fallback_reason() const { return instance_->fallback_reason(); }

  // Serves until `shutdown`, SIGTERM, or the death of the sandbox's init.
  Result<void> serve();

 private:
  struct Client {
    UniqueFd fd;
    protocol::FrameReader reader{protocol::kMaxClientFrame};
    std::string out;         // frames not yet written
    bool close_after_flush = false;
    bool output_paused = false;  // its commands' pipes are not read while it catches up
    // Closed clients stay in clients_ until the current batch of events is done (callers
    // up the stack may hold a reference); nothing is sent to them any more.
    bool closed = false;
    std::set<uint64_t> commands;
  };
  struct Command {
    uint64_t id = 0;
    int client = -1;
    pid_t sandbox_pid = 0;  // the command's pid (and process group) inside the sandbox
    CommandRequest request;
    bool stream = false;    // relay output to the client as it comes
    UniqueFd out, err;
    std::unique_ptr<OutputCapture> out_capture, err_capture;
    std::chrono::steady_clock::time_point started;
    int timer = -1;
    uint64_t oom_before = 0;
    CommandEnd end;
    bool ended = false;
  };

  Supervisor(const StateStore& store, SandboxRecord record, LaunchEnvelope launch)
      : store_(store), record_(std::move(record)), launch_(std::move(launch)) {}

  Result<void> register_handlers();
  Result<void> start_helpers(const InstallLayout& layout);
  const SandboxRecord& record_facts_at_start();
  Result<void> mount_files(const Volume& volume);
  Result<void> attach_volume(const Volume& volume, Result<void> mounted);
  Result<std::string> mount_home();
  void accept_clients();
  void on_client_event(int fd, uint32_t events);
  void handle_request(Client& client, protocol::Frame frame);
  void reply(Client& client, const protocol::Json& message);
  void reply_error(Client& client, const Error& error);
  void flush(Client& client);
  void close_client(int fd);

  void start_command(Client& client, protocol::Frame& frame);
  void on_output(uint64_t id, bool is_stdout);
  bool relay_chunk(Command& c, bool is_stdout);  // true if it relayed bytes
  void on_init_messages();
  void on_deadline(uint64_t id);
  void finish_command(uint64_t id);
  void set_output_paused(Client& client, bool paused);

  void on_init_message(const protocol::Json& message);
  void on_init_death();
  void accept_later();
  void on_seccomp_violation(Result<seccomp::Violation> violation);
  Result<uint64_t> fork_kernel_from_zygote(const std::vector<std::pair<std::string, int>>& fds);
  void shutdown(Client* requester);
  void stop_sandbox();  // bucket servers, then the sandbox; idempotent
  Result<void> watch_exit(int pidfd, std::function<void()> on_exit);
  EnvList sandbox_env() const;  // every process's: the egress proxy's and pip's settings, then --env
  // A request's working directory; "" is the sandbox's workspace root.
  Result<void> check_account(const std::string& run_as) const override {
    NSBOX_CHECK(record_.spec.accounts.identity(run_as));
    return {};
  }
  std::string working_dir(const std::string& asked) const override {
    return asked.empty() ? record_.spec.workspace_root : asked;
  }
  void change_allowlist(Client& client, const protocol::Json& request);
  void claim(Client& client, const protocol::Json& request);
  void restore_cpu_weight();  // a claimed member's, at its first request (claim())
  // The sandbox's time to live: removed `seconds` from now (the record's expires_at).
  Result<void> set_deadline(uint64_t seconds);
  void expire();  // the deadline passed: everything of the sandbox stopped and removed
  void change_ttl(Client& client, const protocol::Json& request);
  // port_open, port_list, port_close (runtime/supervisor/port_forwards.h); the record's
  // `ports` follow.
  void handle_ports(Client& client, const std::string& op, const protocol::Json& request);
  Result<PortForwards*> port_forwards();  // made at the first forward

  // KernelHost: what the kernel session asks of us.
  Result<uint64_t> spawn_in_sandbox(const std::vector<std::string>& argv,
                                    const std::vector<std::pair<std::string, int>>& fds) override;
  Result<uint64_t> spawn_kernel(const std::vector<std::string>& argv,
                                const std::vector<std::pair<std::string, int>>& fds) override;
  void signal_in_sandbox(uint64_t command_id, int signal, bool whole_group) override;
  EventLoop& loop() override { return *loop_; }
  uint64_t oom_kills() const override { return instance_->oom_kills(); }
  std::string oom_message() const override;
  FilesVolume* files_volume() override { return volume_ ? &*volume_ : nullptr; }
  void send_to_client(int client_fd, const protocol::Json& message) override;
  bool client_backlogged(int client_fd) const override;
  void tool_call(const std::string& helper, protocol::Json args, uint64_t cell, ToolBridge::Reply reply) override;
  size_t abandon_tool_calls(uint64_t cell) override { return tools_ ? tools_->abandon(cell) : 0; }

  // ProcessHost: what processes that outlive a request (PTY sessions among them) ask of us.
  Result<UniqueFd> open_pty_master() override;
  Result<uint64_t> spawn_on_tty(const Launch& launch, int slave) override;
  Result<uint64_t> spawn_with_stdio(const Launch& launch, int in, int out, int err) override;
  Result<uint64_t> spawn_process(const Launch& launch, const std::vector<int>& stdio, bool tty);
  // Init's spawn request for `launch` (its environment, working directory and identity),
  // without its fds; an unknown account is an error naming who there is.
  Result<protocol::Json> spawn_request(uint64_t id, const Launch& launch, const protocol::Json& fd_names) const;
  std::vector<std::string> shell_of_image(const std::vector<std::string>& argv) const;
  bool image_has_bash_ = true;  // the host's system, or an image with /bin/bash

  const StateStore& store_;
  SandboxRecord record_;  // what is saved: the spec, and the facts as they are now
  int ttl_timer_ = -1;     // the deadline's timer, while one is set
  LaunchEnvelope launch_;  // env values; its secrets wiped once handed on
  std::unique_ptr<SandboxInstance> instance_;
  BucketServers buckets_;  // stopped before instance_ goes (members go in reverse)
  NetProxy net_proxy_;      // `--net allow=` only
  NatHelper nat_;           // `--net internet` only
  std::unique_ptr<EventLoop> loop_;
  // After the loop (they leave it as they go), before the kernel session (whose calls
  // they hold: stopped first, they drop them unanswered).
  std::unique_ptr<BridgeSocket> bridge_socket_;
  UniqueFd listen_fd_;
  UniqueFd signal_fd_;
  protocol::FrameReader init_reader_{protocol::kMaxInitFrame};
  std::map<int, Client> clients_;
  std::map<uint64_t, Command> commands_;
  uint64_t next_command_id_ = 1;
  std::optional<FilesVolume> volume_;
  // Seccomp kills by the process group they happened in (a command's pid): one may come
  // before init has told us which pid the command has. Bounded.
  std::map<pid_t, std::vector<std::string>> seccomp_kills_;
  std::unique_ptr<KernelSession> kernel_;
  std::unique_ptr<ZygoteKernels> zygote_kernels_;  // `serve --kernel-zygote`'s kernels
  bool weight_deferred_ = false;                   // claimed, still at the pool's CPU weight
  bool zygote_timed_out_ = false;                  // a zygote kernel's start timed out: init's from then on
  // Where the last kernel came from ("zygote", "init"; "" before the first), and, when
  // from init although a zygote was given, why: `status` reports both (inspect).
  std::string kernel_origin_;
  std::string kernel_zygote_fallback_;
  std::unique_ptr<Processes> processes_;
  std::unique_ptr<PortForwards> ports_;  // before the loop goes (they leave it)
  std::unique_ptr<ToolBridge> tools_;  // goes first: its pending calls refer to kernel_
};

}  // namespace nsbox
