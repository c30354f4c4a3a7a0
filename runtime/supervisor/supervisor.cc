#include "runtime/supervisor/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <linux/sched.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <cstdio>
#include <unistd.h>

#include "isolation/sys/log.h"
#include "isolation/sys/rfc3339.h"
#include "isolation/sys/syscall.h"
#include "isolation/mount_injection.h"
#include "isolation/namespace_child.h"
#include "isolation/userns.h"
#include "mounts/volume_image.h"
#include "runtime/core/port_number.h"
#include "runtime/core/sandbox_removal.h"
#include "runtime/images/image_store.h"
#include "runtime/protocol/unix_socket.h"

namespace nsbox {
namespace {

using protocol::Json;

// A client that reads slowly stops the relay of its commands' output at the high mark
// (the command then blocks on a full pipe) and resumes at the low mark, so a command
// printing a gigabyte never makes the supervisor hold more than this per client.
constexpr size_t kOutputHighWater = 1u << 20;
constexpr size_t kOutputLowWater = 256u << 10;
constexpr size_t kReadChunk = 64u << 10;
constexpr uint64_t kKillGraceMs = 5000;
// After a command exits, at most this much more output is taken from each pipe: a
// process it left in the background may keep writing forever.
constexpr size_t kDrainLimit = 256u << 10;
// Bounds on what clients can make the supervisor hold (each command holds three fds).
constexpr size_t kMaxClients = 256;
constexpr size_t kMaxCommands = 256;
constexpr uint64_t kAcceptRetryMs = 100;
constexpr uint64_t kClaimWeightGraceMs = 1000;  // claim(): the default weight at the latest then
constexpr size_t kMaxKillsPerGroup = 8;  // seccomp kills remembered for one command

Json error_json(const Error& e) {
  Json j = {{"code", error_code_name(e.code)}, {"message", e.message}};
  if (!e.hint.empty()) j["hint"] = e.hint;
  return j;
}

}  // namespace

Result<std::unique_ptr<Supervisor>> Supervisor::start(const StateStore& store, SandboxRecord record, LaunchEnvelope launch,
                                                      const InstallLayout& layout) {
  std::unique_ptr<Supervisor> self(new Supervisor(store, std::move(record), std::move(launch)));
  const StateRoot& root = store.root();
  const std::string& id = self->record_.id;
  const SandboxSpec& spec = self->record_.spec;
  auto volume = NSBOX_TRY(VolumeStore(root).load(spec.volume));
  InstanceOptions options{id, spec.size, spec.net.mode, volume.image ? "" : volume.path, volume.image, {},
                          layout.sandbox_dir(), root.cache_dir(), root.sandbox_dir(id) + "/bridge", spec.packages.wheelhouse, {}, {}, {},
                          spec.workspace_root, spec.accounts};
  // /home/user is in the sandbox from its first instant (the kernel's user site is there).
  if (!self->record_.facts.home.empty()) {
    auto home = self->mount_home();
    if (!home) return fail(std::move(home.error()).context("mount the home volume " + self->record_.facts.home));
    options.home_dir = std::move(*home);
  }
  if (!spec.image.empty()) {
    options.image_tree = images::ImageStore::tree_in(root.data_dir, spec.image);
    UniqueFd tree(::open(options.image_tree.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!tree)
      return fail(make_error(ErrorCode::kNotFound, "image " + spec.image.substr(0, 12) + ", the sandbox's root, is not in this state root",
                             "pull it again (nsbox image pull)"));
    open_how how{};
    how.flags = O_PATH | O_CLOEXEC;
    how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
    self->image_has_bash_ = UniqueFd(static_cast<int>(::syscall(SYS_openat2, tree.get(), "bin/bash", &how, sizeof how))).get() >= 0;
  }
  // Listening before the sandbox is built: its directory is bound in then.
  self->bridge_socket_ = NSBOX_TRY(BridgeSocket::listen(options.bridge_dir));
  for (const auto& m : spec.mounts) options.mount_points.push_back(m.mount_path);
  // An image volume is mounted while the sandbox is built (the two meet only at the
  // injection): a loop device and an ext4 mount off the critical path, in our own
  // process, while the sandbox's first process builds its root (docs/design.md, "Volumes").
  Result<void> files_mounted = fail(make_error(ErrorCode::kInternal, "the files volume was not mounted"));
  options.while_building = [&] { files_mounted = self->mount_files(volume); };
  self->instance_ = NSBOX_TRY(SandboxInstance::start(options));
  // A pool's member is built and waits at the least CPU weight: live sandboxes come first.
  if (!self->record_.facts.pool.empty())
    NSBOX_CHECK_CTX(self->instance_->set_cpu_weight(1), "lower the CPU weight of a warm pool's sandbox");
  NSBOX_CHECK(self->register_handlers());
  // The kernel first: Python boots (on another core) while the volume is attached. A
  // lazy one waits for the first cell (KernelSession::submit starts a stopped kernel).
  KernelSession::Options kernel{spec.preload, spec.memory_merge, {}};
  if (!spec.image.empty())
    kernel.unavailable = "cells in a sandbox made from an image run in the image's own Python, through a kernel nsbox does not have yet";
  self->kernel_ = std::make_unique<KernelSession>(static_cast<KernelHost&>(*self), std::move(kernel));
  if (!spec.lazy_kernel) self->kernel_->start();
  self->processes_ = std::make_unique<Processes>(static_cast<ProcessHost&>(*self));
  NSBOX_CHECK_CTX(self->attach_volume(volume, std::move(files_mounted)), "attach the files volume " + volume.name);
  NSBOX_CHECK(self->start_helpers(layout));
  self->listen_fd_ = NSBOX_TRY(protocol::listen_unix(root.socket_path(id)));
  NSBOX_CHECK(self->loop_->add(self->listen_fd_.get(), EPOLLIN, [s = self.get()](uint32_t) { s->accept_clients(); }));
  // Its time to live runs here, not in a server: it holds while none runs.
  if (spec.ttl_s) NSBOX_CHECK(self->set_deadline(spec.ttl_s));
  NSBOX_CHECK(store.save(self->record_facts_at_start()));
  return self;
}

Result<void> Supervisor::set_deadline(uint64_t seconds) {
  if (ttl_timer_ >= 0) loop_->cancel_timer(ttl_timer_);
  ttl_timer_ = NSBOX_TRY(loop_->add_timer(seconds * 1000, [this] { expire(); }));
  record_.facts.expires_at = sys::rfc3339(static_cast<int64_t>(::time(nullptr)) + static_cast<int64_t>(seconds));
  return {};
}

void Supervisor::expire() {
  ttl_timer_ = -1;
  log::info("the sandbox's time to live ran out (" + record_.facts.expires_at + "): removing it");
  shutdown(nullptr);  // everything of it stopped; its mounts are ours alone now
  const std::string& id = record_.id;
  for (const std::string& mount : {store_.root().volume_mount(id), store_.root().home_mount(id)}) ::umount2(mount.c_str(), MNT_DETACH);
  if (auto removed = remove_sandbox_files(store_, id, record_, /*keep_files=*/false); !removed)
    log::error("remove the expired sandbox: " + removed.error().message);
}

// {"op": "ttl", "ttl_s": N}: removed N seconds from now (an extension, or a first TTL).
void Supervisor::change_ttl(Client& client, const Json& request) {
  SandboxSpec asked;
  if (auto read = read_request_fields({{"ttl_s", request.value("ttl_s", Json())}}, asked); !read)
    return reply_error(client, read.error());
  if (asked.ttl_s == 0)
    return reply_error(client, make_error(ErrorCode::kInvalidArgument, "\"ttl_s\" must be at least 1 second",
                                          "to keep a sandbox without a time to live, make it without one"));
  if (auto set = set_deadline(asked.ttl_s); !set) return reply_error(client, set.error());
  if (auto saved = store_.save(record_); !saved) return reply_error(client, saved.error());
  log::info("time to live set: removed at " + record_.facts.expires_at);
  reply(client, {{"ok", true}, {"record", record_.to_json()}});
}

Result<PortForwards*> Supervisor::port_forwards() {
  if (ports_) return ports_.get();
  std::vector<UniqueFd> ns;  // a sandbox on the host's network has none of its own
  if (record_.spec.net.mode != network::Mode::kHost)
    ns = NSBOX_TRY(namespace_child::open_namespaces(instance_->init_pid(), {"user", "net"}));
  ports_ = std::make_unique<PortForwards>(*loop_, std::move(ns));
  return ports_.get();
}

void Supervisor::handle_ports(Client& client, const std::string& op, const Json& request) {
  auto ports = port_forwards();
  if (!ports) return reply_error(client, ports.error());
  if (op == "port_list") {
    Json forwards = Json::array();
    for (const auto& f : (*ports)->list()) forwards.push_back(f.to_json());
    return reply(client, {{"ok", true}, {"forwards", forwards}});
  }
  auto port = port_field(request, "port", 1);
  if (!port) return reply_error(client, port.error());
  Json answer = {{"ok", true}};
  if (op == "port_open") {
    auto host_port = port_field(request, "host_port", 0, 0);  // absent: a free one
    if (!host_port) return reply_error(client, host_port.error());
    const Json& host = request.contains("host") ? request["host"] : Json("");
    if (!host.is_string()) return reply_error(client, make_error(ErrorCode::kInvalidArgument, "\"host\" must be a string"));
    auto forward = (*ports)->open(*port, host.get<std::string>(), *host_port);
    if (!forward) return reply_error(client, forward.error());
    answer["forward"] = forward->to_json();
  } else if (op == "port_close") {
    answer["closed"] = (*ports)->close(*port);
  } else {
    return reply_error(client, make_error(ErrorCode::kInvalidArgument, "unknown request '" + op + "'"));
  }
  record_.facts.ports = (*ports)->list();
  if (auto saved = store_.save(record_); !saved) return reply_error(client, saved.error());
  reply(client, answer);
}

// The host-side processes of the sandbox: its bucket mounts' servers, its network's NAT
// helper or egress proxy, and its tool bridge. Each is handed its secrets, which are then
// wiped here.
Result<void> Supervisor::start_helpers(const InstallLayout& layout) {
  const StateRoot& root = store_.root();
  const std::string& id = record_.id;
  const SandboxSpec& spec = record_.spec;
  auto ids = userns::host_ids();
  std::vector<bucket::MountRequest> mounts;
  for (const auto& m : spec.mounts) mounts.push_back({m, launch_.credentials_for(m.mount_path)});
  auto buckets = BucketServers::start(mounts, {layout.bucket_server(), root.sandbox_dir(id) + "/buckets", root.data_dir + "/staging", id},
                                      instance_->init_pid(), ids.uid, ids.gid);
  // The servers have the credentials now (or failed): we never need them again.
  record_.facts.signed_mounts.clear();
  for (auto& m : mounts) {
    if (!m.credentials.anonymous()) record_.facts.signed_mounts.push_back(m.mount.mount_path);
    m.credentials.wipe();
  }
  for (auto& c : launch_.mount_credentials) c.credentials.wipe();
  if (!buckets) return fail(std::move(buckets.error()));
  buckets_ = std::move(*buckets);
  if (spec.net.mode == network::Mode::kInternet) {
    nat_ = NSBOX_TRY(NatHelper::start({instance_->init_pid(), launch_.helper_netns}));
    NSBOX_CHECK(watch_exit(nat_.pidfd(), [this] { nat_.on_exit(); }));
  }
  if (spec.net.mode == network::Mode::kAllow) {
    net_proxy_ = NSBOX_TRY(NetProxy::start({id, layout.net_proxy(), root.net_denials(id), instance_->init_pid(), spec.net.allow,
                                            launch_.net_resolve, launch_.helper_netns}));
    NSBOX_CHECK(watch_exit(net_proxy_.pidfd(), [this] { net_proxy_.on_exit(); }));
  }
  tools_ = std::make_unique<ToolBridge>(
      *loop_, ToolBridgeSetup{id, layout.tool_bridge(), root.sandbox_dir(id) + "/tools.log", root.shared_dir(id),
                              instance_->init_pid(), ids.uid, ids.gid, spec.tools, launch_.tool_keys},
      [this](int client_fd, const Json& event) { send_to_client(client_fd, event); });
  launch_.tool_keys.wipe();  // the bridge's copy is the one left
  NSBOX_CHECK(bridge_socket_->serve(*loop_, *tools_));
  for (int pidfd : buckets_.pidfds()) NSBOX_CHECK(watch_exit(pidfd, [this, pidfd] { buckets_.on_exit(pidfd); }));
  return {};
}

// The record as the sandbox now runs: what this start learned, and none of what a
// previous run left (a stop's time, its pids and cgroup).
const SandboxRecord& Supervisor::record_facts_at_start() {
  SandboxFacts& f = record_.facts;
  if (f.created_at.empty()) f.created_at = sys::now_rfc3339();
  f.stopped_at.clear();
  if (record_.spec.ttl_s == 0) f.expires_at.clear();  // else set_deadline's, just now
  f.supervisor_pid = ::getpid();
  f.init_pid = instance_->init_pid();
  f.enforcement = instance_->enforcement();
  f.cgroup = instance_->placement();
  f.mount_servers = buckets_.pids();
  f.ports.clear();  // a previous run's forwards went with it
  record_.spec.env_names.clear();
  for (const auto& [k, v] : launch_.env) record_.spec.env_names.push_back(k);
  return record_;
}

// The image volume's mount (mount_files, while the sandbox was built) attached inside the
// running sandbox at /mnt/files; a directory volume (rootless) was bound at the build.
Result<void> Supervisor::attach_volume(const Volume& volume, Result<void> mounted) {
  auto ids = userns::host_ids();
  std::string dir = volume.path;
  if (volume.image) {
    dir = store_.root().volume_mount(record_.id);
    NSBOX_CHECK(std::move(mounted));
    // mkfs makes lost+found, owned by root (nobody, inside): not something a user made.
    ::rmdir((dir + "/lost+found").c_str());
    NSBOX_CHECK(mount_injection::inject(dir, instance_->init_pid(), FilesVolume::kInsidePath, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV));
  }
  volume_.emplace(NSBOX_TRY(FilesVolume::open(dir, ids.uid, ids.gid)));
  return {};
}

// An image volume mounted in our private mount namespace, to be attached inside the
// running sandbox at /mnt/files; a directory volume (rootless) was bound when the sandbox
// was built, and needs nothing here.
Result<void> Supervisor::mount_files(const Volume& volume) {
  if (!volume.image) return {};
  std::string dir = store_.root().volume_mount(record_.id);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return fail(sys_error("mkdir " + dir));
  return volume_image::mount(volume.path, dir);
}

// The home volume, before the sandbox is built: an image is mounted here, in our private
// mount namespace, and bound at /home/user with the rest of the root; a directory
// (rootless) is bound as it is.
Result<std::string> Supervisor::mount_home() {
  auto home = NSBOX_TRY(VolumeStore(store_.root(), VolumeKind::kHome).load(record_.facts.home));
  if (!home.image) return home.path;
  std::string dir = store_.root().home_mount(record_.id);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return fail(sys_error("mkdir " + dir));
  NSBOX_CHECK(volume_image::mount(home.path, dir));
  ::rmdir((dir + "/lost+found").c_str());  // mkfs's, owned by root: not the user's
  return dir;
}

Result<void> Supervisor::register_handlers() {
  loop_ = std::make_unique<EventLoop>(NSBOX_TRY(EventLoop::create()));
  sigset_t mask;
  sigemptyset(&mask);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&mask, sig);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  signal_fd_.reset(::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!signal_fd_) return fail(sys_error("signalfd"));

  int control = instance_->control_fd();
  ::fcntl(control, F_SETFL, ::fcntl(control, F_GETFL) | O_NONBLOCK);
  NSBOX_CHECK(loop_->add(control, EPOLLIN, [this](uint32_t) { on_init_messages(); }));
  NSBOX_CHECK(loop_->add(instance_->pidfd(), EPOLLIN, [this](uint32_t) { on_init_death(); }));
  NSBOX_CHECK(loop_->add(instance_->seccomp_listener_fd(), EPOLLIN, [this](uint32_t events) {
    if (events & EPOLLIN) on_seccomp_violation(instance_->take_seccomp_violation());
    // Hung up: no process of the sandbox is left under the filter (its end): watched on,
    // the hang-up would wake the loop for ever.
    if (events & (EPOLLHUP | EPOLLERR)) loop_->remove(instance_->seccomp_listener_fd());
  }));
  zygote_kernels_ = std::make_unique<ZygoteKernels>(
      *loop_, [this](Result<seccomp::Violation> v) { on_seccomp_violation(std::move(v)); },
      [this](uint64_t id, std::optional<int> code, std::optional<int> signal) {
        if (kernel_->owns(id)) kernel_->on_exited(code, signal);
      });
  NSBOX_CHECK(loop_->add(signal_fd_.get(), EPOLLIN, [this](uint32_t) { shutdown(nullptr); }));
  return {};
}

Result<void> Supervisor::serve() {
  auto result = loop_->run();
  stop_sandbox();
  ::unlink(store_.root().socket_path(record_.id).c_str());
  return result;
}

// A helper's pidfd, readable once it has exited: `on_exit` reaps and says so, once.
Result<void> Supervisor::watch_exit(int pidfd, std::function<void()> on_exit) {
  return loop_->add(pidfd, EPOLLIN, [this, pidfd, on_exit = std::move(on_exit)](uint32_t) {
    loop_->remove(pidfd);
    on_exit();
  });
}

void Supervisor::tool_call(const std::string& helper, Json args, uint64_t cell, ToolBridge::Reply reply) {
  if (!tools_) return reply({{"result", nullptr}, {"error", helper + ": the tool bridge is not running"}});
  tools_->call(helper, std::move(args), cell, std::move(reply));
}

// The bucket servers first: a sandbox process in a FUSE request (an upload at close, a
// download at open) waits in the kernel, beyond SIGKILL's reach, until its server answers
// or the connection ends. Killing the sandbox first would wait on the remote, past the
// bound of destroy() (the cgroup then outlives the supervisor); stopping the servers ends
// every connection, and the sandbox dies at once.
void Supervisor::stop_sandbox() {
  if (processes_) processes_->kill_all();
  if (tools_) tools_->stop();
  if (net_proxy_.pidfd() >= 0) loop_->remove(net_proxy_.pidfd());
  net_proxy_.stop();
  if (nat_.pidfd() >= 0) loop_->remove(nat_.pidfd());
  nat_.stop();
  for (int pidfd : buckets_.pidfds()) loop_->remove(pidfd);  // no exit report for a server we stop
  buckets_.stop();
  (void)instance_->destroy();
}

void Supervisor::accept_clients() {
  for (;;) {
    UniqueFd fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOMEM || errno == ENOBUFS) accept_later();
      return;
    }
    if (clients_.size() >= kMaxClients) {
      (void)::send(fd.get(), protocol::encode({{"ok", false}, {"error", error_json(make_error(
                   ErrorCode::kBusy, "the sandbox has " + std::to_string(kMaxClients) + " connections open"))}}).c_str(),
                   0, MSG_NOSIGNAL);  // best effort; the connection closes either way
      continue;
    }
    int raw = fd.get();
    Client& c = clients_[raw];
    c.fd = std::move(fd);
    if (!loop_->add(raw, EPOLLIN, [this, raw](uint32_t ev) { on_client_event(raw, ev); })) clients_.erase(raw);
  }
}

// Out of fds: a level-triggered listening socket would wake us in a loop. Stop watching
// it for a moment.
void Supervisor::accept_later() {
  (void)loop_->modify(listen_fd_.get(), 0);
  (void)loop_->add_timer(kAcceptRetryMs, [this] { (void)loop_->modify(listen_fd_.get(), EPOLLIN); });
}

void Supervisor::on_client_event(int fd, uint32_t events) {
  auto it = clients_.find(fd);
  if (it == clients_.end() || it->second.closed) return;
  Client& c = it->second;
  if (events & EPOLLOUT) flush(c);
  if (c.closed || !(events & (EPOLLIN | EPOLLHUP | EPOLLERR)) || c.close_after_flush) return;
  auto status = c.reader.read_available(fd);
  if (!status) {
    // An oversized or unreadable message: the stream cannot be resynchronised. Answer,
    // then close this connection; the supervisor and every other client go on.
    c.close_after_flush = true;
    reply_error(c, status.error());
    return;
  }
  while (!c.closed && c.reader.has_frame()) {
    auto frame = c.reader.next();
    if (!frame) {
      reply_error(c, frame.error());
      continue;
    }
    // A field of the wrong type (nlohmann throws) is the client's error, not our crash.
    try {
      handle_request(c, std::move(*frame));
    } catch (const protocol::Json::exception& e) {
      reply_error(c, make_error(ErrorCode::kInvalidArgument, std::string("malformed request: ") + e.what()));
    }
  }
  if (*status == protocol::FrameReader::Status::kClosed) close_client(fd);
}

void Supervisor::handle_request(Client& client, protocol::Frame frame) {
  const std::string op = frame.message.value("op", "");
  // A warm pool's free member is nobody's yet: nothing runs in it before its claim.
  if (op != "claim" && op != "status" && op != "ping" && op != "shutdown")
    if (auto free = require_not_free_member(record_); !free) return reply_error(client, free.error());
  if (op != "claim") restore_cpu_weight();  // a claimed member's first request
  if (op == "exec") return start_command(client, frame);
  if (op.starts_with("proc_") || op.starts_with("pty_")) return processes_->handle(client.fd.get(), op, frame.message);
  if (op.starts_with("port_")) return handle_ports(client, op, frame.message);
  if (op == "execute") {
    auto cell = CellRequest::from_json(frame.message);
    if (!cell) return reply_error(client, cell.error());
    return kernel_->submit(client.fd.get(), std::move(*cell));
  }
  if (op == "interrupt") {
    kernel_->interrupt();
    return reply(client, {{"ok", true}});
  }
  if (op == "restart") {
    kernel_->restart();
    return reply(client, {{"ok", true}});
  }
  if (op == "ping") return reply(client, {{"ok", true}});
  if (op == "status") {
    Json status = {{"ok", true}, {"record", record_.to_json()}, {"oom_kills", instance_->oom_kills()},
                   {"running_commands", commands_.size()}, {"kernel", kernel_->status()}};
    if (!kernel_origin_.empty()) status["kernel"]["origin"] = kernel_origin_;
    if (!kernel_zygote_fallback_.empty()) status["kernel"]["zygote_fallback"] = kernel_zygote_fallback_;
    if (auto used = instance_->memory_usage()) status["memory_usage_bytes"] = *used;
    return reply(client, status);
  }
  if (op == "resize") {
    auto size = parse_size_tier(frame.message.value("size", ""));
    if (!size) return reply_error(client, size.error());
    if (auto r = instance_->resize(*size); !r) return reply_error(client, r.error());
    record_.spec.size = *size;
    if (auto r = store_.save(record_); !r) return reply_error(client, r.error());
    return reply(client, {{"ok", true}, {"record", record_.to_json()}});
  }
  if (op == "shutdown") return shutdown(&client);
  if (op == "claim") return claim(client, frame.message);
  if (op == "net") return change_allowlist(client, frame.message);
  if (op == "ttl") return change_ttl(client, frame.message);
  if (op == "tool_events") {  // this client serves the sandbox's tool calls from now on
    auto subscribed = tools_->subscribe(client.fd.get());
    return subscribed ? reply(client, {{"ok", true}}) : reply_error(client, subscribed.error());
  }
  if (op == "tool_answer") {
    const Json& m = frame.message;
    if (!m.contains("call_id") || !m["call_id"].is_string())
      return reply_error(client, make_error(ErrorCode::kInvalidArgument, "tool_answer needs \"call_id\""));
    auto done = tools_->answer(m["call_id"].get<std::string>(), m.value("result", Json()), m.value("error", Json()));
    return done ? reply(client, {{"ok", true}}) : reply_error(client, done.error());
  }
  reply_error(client, make_error(ErrorCode::kInvalidArgument, "unknown request \"" + op + "\"",
                                 "requests are exec, execute, interrupt, restart, status, resize, net, ttl, shutdown, "
                                 "ping, tool_events, tool_answer and claim"));
}

// A warm pool's member becomes its creator's sandbox: its name and environment (for the
// kernel that runs, and for every command, PTY and kernel after), fresh random state, its
// size's CPU weight. The record says it was claimed (create_path "warm").
void Supervisor::claim(Client& client, const Json& request) {
  if (record_.facts.pool.empty())
    return reply_error(client, make_error(ErrorCode::kBusy, "sandbox " + record_.id + " is not a warm pool's free member"));
  EnvList env;
  if (auto e = request.find("env"); e != request.end() && e->is_object())
    for (const auto& [k, v] : e->items())
      if (v.is_string()) env.emplace_back(k, v.get<std::string>());
  // The CPU weight goes back to the default at the creator's first request (or within
  // kClaimWeightGraceMs), not now: the reseed queued below then runs in the kernel while
  // the claim's answer goes back, and a member's weight lets the server and the client
  // take the CPU it would run on (on 2 cores the answer waited ~0.7 ms for it).
  weight_deferred_ = true;  // once: a claimed sandbox is no member to claim again (above)
  (void)loop_->add_timer(kClaimWeightGraceMs, [this] { restore_cpu_weight(); });
  launch_.env = env;
  kernel_->configure(env);
  record_.spec.name = request.value("name", "");
  record_.spec.env_names.clear();
  for (const auto& [k, v] : env) record_.spec.env_names.push_back(k);
  record_.facts.pool.clear();
  record_.facts.create_path = "warm";
  record_.facts.created_at = sys::now_rfc3339();
  if (auto saved = store_.save(record_); !saved) return reply_error(client, saved.error());
  reply(client, {{"ok", true}, {"record", record_.to_json()}});
}

// Once, whatever happens: a cgroup that refuses the write leaves the sandbox at the pool's
// weight (said in the log), which slows it and breaks nothing; its requests go on.
void Supervisor::restore_cpu_weight() {
  if (!weight_deferred_) return;
  weight_deferred_ = false;
  if (auto w = instance_->set_cpu_weight(100); !w)
    log::warn("give the claimed sandbox its CPU weight back: " + w.error().message);
}

// The allowlist is the proxy's state, not the sandbox's: replaced live, no restart.
void Supervisor::change_allowlist(Client& client, const Json& request) {
  if (record_.spec.net.mode != network::Mode::kAllow)
    return reply_error(client, make_error(ErrorCode::kInvalidArgument,
                                          "sandbox " + record_.id + " has --net " + std::string(network::mode_name(record_.spec.net.mode)) +
                                              ": only a sandbox made with --net allow=... has an allowlist to change",
                                          "create it with --net allow=HOST[,...] (an empty list allows nothing)"));
  auto allow = net::AllowList::from_json(request.value("allow", Json::object()));
  if (!allow) return reply_error(client, allow.error());
  if (auto set = net_proxy_.set_allow(*allow); !set) return reply_error(client, set.error());
  record_.spec.net.allow = std::move(*allow);
  if (auto saved = store_.save(record_); !saved) return reply_error(client, saved.error());
  log::info("allowlist changed to " + record_.spec.net.allow.describe());
  reply(client, {{"ok", true}, {"record", record_.to_json()}});
}

EnvList Supervisor::sandbox_env() const {
  EnvList env;
  // The image's Env first: what nsbox and the user set after it wins.
  for (const auto& assignment : record_.spec.image_env)
    if (auto kv = parse_env_assignment(assignment)) env.push_back(std::move(*kv));
  if (record_.spec.net.mode == network::Mode::kAllow)
    for (auto& kv : net::proxy_environment()) env.push_back(std::move(kv));
  for (auto& kv : record_.spec.packages.environment()) env.push_back(std::move(kv));
  env.insert(env.end(), launch_.env.begin(), launch_.env.end());
  return env;
}

void Supervisor::reply(Client& client, const Json& message) {
  if (client.closed) return;
  client.out += protocol::encode(message);
  flush(client);
}

void Supervisor::reply_error(Client& client, const Error& error) { reply(client, {{"ok", false}, {"error", error_json(error)}}); }

void Supervisor::flush(Client& client) {
  if (client.closed) return;
  while (!client.out.empty()) {
    ssize_t n = ::send(client.fd.get(), client.out.data(), client.out.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN) break;
      close_client(client.fd.get());  // the client is gone; its commands are killed
      return;
    }
    client.out.erase(0, static_cast<size_t>(n));
  }
  int fd = client.fd.get();
  if (client.out.empty() && client.close_after_flush) return close_client(fd);
  (void)loop_->modify(fd, client.out.empty() ? uint32_t{EPOLLIN} : uint32_t{EPOLLIN | EPOLLOUT});
  if (client.out.size() > kOutputHighWater) set_output_paused(client, true);
  else if (client.out.size() < kOutputLowWater) set_output_paused(client, false);
}

void Supervisor::set_output_paused(Client& client, bool paused) {
  if (client.output_paused == paused) return;
  client.output_paused = paused;
  for (uint64_t id : client.commands) {
    auto it = commands_.find(id);
    if (it == commands_.end()) continue;
    for (UniqueFd* p : {&it->second.out, &it->second.err})
      if (*p) (void)loop_->modify(p->get(), paused ? uint32_t{0} : uint32_t{EPOLLIN});
  }
  kernel_->on_client_backlog(client.fd.get());  // a streamed cell's output, the same way
}

bool Supervisor::client_backlogged(int client_fd) const {
  auto it = clients_.find(client_fd);
  return it != clients_.end() && !it->second.closed && it->second.output_paused;
}

void Supervisor::close_client(int fd) {
  auto it = clients_.find(fd);
  if (it == clients_.end() || it->second.closed) return;
  it->second.closed = true;
  // A client that goes away takes its running commands with it (like an interrupted
  // `docker exec`): nothing keeps running for nobody.
  for (uint64_t id : it->second.commands) {
    auto c = commands_.find(id);
    if (c == commands_.end()) continue;
    c->second.client = -1;
    (void)protocol::send_frame(instance_->control_fd(), {{"op", "signal"}, {"id", id}, {"signal", SIGKILL}});
  }
  it->second.commands.clear();
  kernel_->client_gone(fd);
  if (processes_) processes_->client_gone(fd);
  if (tools_) tools_->client_gone(fd);
  loop_->remove(fd);
  // Erased (and its fd closed, so the number cannot be reused) once no caller holds it.
  loop_->defer([this, fd] {
    auto again = clients_.find(fd);
    if (again != clients_.end() && again->second.closed) clients_.erase(again);
  });
}

void Supervisor::start_command(Client& client, protocol::Frame& frame) {
  auto request = CommandRequest::from_json(frame.message);
  if (!request) return reply_error(client, request.error());
  if (commands_.size() >= kMaxCommands)
    return reply_error(client, make_error(ErrorCode::kBusy, std::to_string(kMaxCommands) + " commands are running in this sandbox",
                                          "wait for some to finish"));
  auto stdin_flag = frame.message.find("stdin");
  bool with_stdin = stdin_flag != frame.message.end() && stdin_flag->is_boolean() && stdin_flag->get<bool>();
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return reply_error(client, sys_error("pipe2 for stdout"));
  UniqueFd out_r(out_pipe[0]), out_w(out_pipe[1]);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) return reply_error(client, sys_error("pipe2 for stderr"));
  UniqueFd err_r(err_pipe[0]), err_w(err_pipe[1]);
  ::fcntl(out_r.get(), F_SETFL, O_NONBLOCK);
  ::fcntl(err_r.get(), F_SETFL, O_NONBLOCK);

  uint64_t id = next_command_id_++;
  std::vector<int> fds;
  Json names = Json::array();
  if (with_stdin && !frame.fds.empty()) {
    fds.push_back(frame.fds[0].get());
    names.push_back("stdin");
  }
  fds.push_back(out_w.get());
  names.push_back("stdout");
  fds.push_back(err_w.get());
  names.push_back("stderr");
  auto spawn = spawn_request(id, {request->argv, request->env, request->cwd, request->run_as}, names);
  if (!spawn) return reply_error(client, spawn.error());
  if (auto r = protocol::send_frame(instance_->control_fd(), *spawn, fds); !r)
    return reply_error(client, std::move(r.error()).context("ask the sandbox's init to start the command"));

  Command& c = commands_[id];
  c.id = id;
  c.client = client.fd.get();
  c.request = std::move(*request);
  auto stream_flag = frame.message.find("stream");
  c.stream = stream_flag == frame.message.end() || !stream_flag->is_boolean() || stream_flag->get<bool>();
  std::string prefix = "command-" + std::to_string(id);
  c.out_capture = std::make_unique<OutputCapture>(OutputCapture::kDefaultInlineLimit, files_volume(), c.request.output_dir,
                                                  prefix + "-stdout.txt");
  c.err_capture = std::make_unique<OutputCapture>(OutputCapture::kDefaultInlineLimit, files_volume(), c.request.output_dir,
                                                  prefix + "-stderr.txt");
  c.out = std::move(out_r);
  c.err = std::move(err_r);
  c.started = std::chrono::steady_clock::now();
  c.oom_before = instance_->oom_kills();
  client.commands.insert(id);
  (void)loop_->add(c.out.get(), EPOLLIN, [this, id](uint32_t) { on_output(id, true); });
  (void)loop_->add(c.err.get(), EPOLLIN, [this, id](uint32_t) { on_output(id, false); });
  auto timer = loop_->add_timer(static_cast<uint64_t>(c.request.timeout_s * 1000), [this, id] { on_deadline(id); });
  if (timer) c.timer = *timer;
  if (c.stream) reply(client, {{"event", "started"}, {"exec_id", id}});  // as a cell's: only to a streaming caller
}

void Supervisor::on_output(uint64_t id, bool is_stdout) {
  auto it = commands_.find(id);
  if (it != commands_.end()) relay_chunk(it->second, is_stdout);
}

bool Supervisor::relay_chunk(Command& c, bool is_stdout) {
  std::string buf;
  if (!loop_->read_chunk(is_stdout ? c.out : c.err, buf)) return false;
  (is_stdout ? c.out_capture : c.err_capture)->append(buf);
  auto client = clients_.find(c.client);
  if (client == clients_.end() || client->second.closed) return true;  // nobody listens; it is being killed
  if (!c.stream) return true;
  Json event = {{"event", "output"}, {"exec_id", c.id}, {"stream", is_stdout ? "stdout" : "stderr"}};
  protocol::put_bytes(event, buf);
  reply(client->second, event);
  return true;
}

void Supervisor::on_init_messages() {
  auto status = init_reader_.read_available(instance_->control_fd());
  // init runs inside the sandbox: its messages are untrusted input like a client's.
  protocol::dispatch_untrusted(init_reader_, "init", [this](const Json& m) { on_init_message(m); });
  if (!status || *status == protocol::FrameReader::Status::kClosed) on_init_death();
}

void Supervisor::on_init_message(const Json& m) {
  std::string event = m.value("event", "");
  if (kernel_->owns(m.value("id", uint64_t{0}))) {
    if (event == "started") kernel_->on_started(m.value("pid", 0));
    if (event == "spawn_failed") kernel_->on_spawn_failed(m.value("errno", ENOENT));
    if (event == "exited") {
      std::optional<int> code, signal;
      if (m.contains("exit_code")) code = m["exit_code"].get<int>();
      if (m.contains("signal")) signal = m["signal"].get<int>();
      kernel_->on_exited(code, signal);
    }
    return;
  }
  if (processes_ && processes_->on_init_message(m.value("id", uint64_t{0}), m)) return;
  auto it = commands_.find(m.value("id", uint64_t{0}));
  if (it == commands_.end()) return;
  Command& c = it->second;
  if (event == "started") {
    c.sandbox_pid = m.value("pid", 0);
  } else if (event == "spawn_failed") {
    c.end.spawn_errno = m.value("errno", ENOENT);
    finish_command(c.id);
  } else if (event == "exited") {
    if (m.contains("exit_code")) c.end.exit_code = m["exit_code"].get<int>();
    if (m.contains("signal")) c.end.signal = m["signal"].get<int>();
    finish_command(c.id);
  }
}

void Supervisor::on_deadline(uint64_t id) {
  auto it = commands_.find(id);
  if (it == commands_.end()) return;
  it->second.end.timed_out = true;
  (void)protocol::send_frame(instance_->control_fd(), {{"op", "signal"}, {"id", id}, {"signal", SIGKILL}});
  // If init cannot report the exit (it should, at once), the command ends anyway.
  auto grace = loop_->add_timer(kKillGraceMs, [this, id] { finish_command(id); });
  it->second.timer = grace ? *grace : -1;
}

void Supervisor::finish_command(uint64_t id) {
  auto it = commands_.find(id);
  if (it == commands_.end()) return;
  Command& c = it->second;
  loop_->cancel_timer(c.timer);
  // Whatever the command wrote before it exited is in the pipes now; later writes by
  // processes it left behind are not waited for (docs/semantics.md).
  for (bool is_stdout : {true, false}) {
    for (size_t taken = 0; taken < kDrainLimit && relay_chunk(c, is_stdout); taken += kReadChunk) {}
    UniqueFd& pipe = is_stdout ? c.out : c.err;
    if (pipe) loop_->remove(pipe.get());
    pipe.reset();
  }
  c.end.oom_killed = instance_->oom_kills() > c.oom_before;
  if (auto kills = seccomp_kills_.find(c.sandbox_pid); c.sandbox_pid && kills != seccomp_kills_.end()) {
    c.end.seccomp_kills = std::move(kills->second);
    seccomp_kills_.erase(kills);
  }
  CommandResult result = classify(c.end, c.request.argv.front(), instance_->limits(),
                                  size_tier_name(instance_->size()), c.request.timeout_s);
  result.duration_ms = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                 std::chrono::steady_clock::now() - c.started).count());
  Json result_json = result.to_json();
  c.out_capture->put(result_json, "stdout");
  c.err_capture->put(result_json, "stderr");
  int client_fd = c.client;
  commands_.erase(it);
  auto client = clients_.find(client_fd);
  if (client == clients_.end() || client->second.closed) return;
  client->second.commands.erase(id);
  reply(client->second, {{"ok", true}, {"exec_id", id}, {"result", result_json}});
}

void Supervisor::on_seccomp_violation(Result<seccomp::Violation> v) {
  if (!v) return;
  std::string what = v->syscall + " (pid " + std::to_string(v->sandbox_pid) + " in the sandbox)";
  log::limited(log::Level::kWarn, "seccomp-kill", "killed by the seccomp filter: " + what);
  if (v->sandbox_pid != 0 && v->sandbox_pid == kernel_->sandbox_pid()) return kernel_->on_seccomp_kill(what);
  // Each command is a process group of its own: the violation belongs to the one whose
  // group the process was in, matched when that command ends. Bounded both ways: a
  // sandbox can make violations as fast as it can fork.
  if (seccomp_kills_.size() >= 256 && !seccomp_kills_.count(v->sandbox_pgid)) seccomp_kills_.erase(seccomp_kills_.begin());
  auto& kills = seccomp_kills_[v->sandbox_pgid];
  if (kills.size() < kMaxKillsPerGroup) kills.push_back(what);
}

void Supervisor::on_init_death() {
  Error dead = make_error(ErrorCode::kSandboxDead, "the sandbox's init exited; the sandbox is dead",
                          "remove it with `nsbox rm " + record_.id + "`");
  for (auto& [id, c] : commands_) {
    auto client = clients_.find(c.client);
    if (client != clients_.end()) reply_error(client->second, dead);  // no-op when closed
  }
  commands_.clear();
  shutdown(nullptr);
}

void Supervisor::shutdown(Client* requester) {
  kernel_->shutdown();
  stop_sandbox();
  if (requester && !requester->closed) {
    // The answer must reach the client before we exit: flush it, bounded (2 s).
    reply(*requester, {{"ok", true}});
    for (int i = 0; i < 100 && !requester->closed && !requester->out.empty(); ++i) {
      pollfd p{requester->fd.get(), POLLOUT, 0};
      ::poll(&p, 1, 20);
      flush(*requester);
    }
  }
  loop_->stop();
}

}  // namespace nsbox

namespace nsbox {

Result<uint64_t> Supervisor::spawn_kernel(const std::vector<std::string>& argv,
                                          const std::vector<std::pair<std::string, int>>& fds) {
  // A kernel whose start would read what the zygote's did not (merging's exec without
  // randomisation; PYTHONPATH, LANG... of the caller's) is exec'd by init.
  // Its process group is signalled through its pidfd (Linux 6.9), never by number.
  static const bool group_signals = sys::can_signal_process_groups(instance_->pidfd());
  std::string why_not;  // with a zygote given, why this kernel starts through init
  if (!launch_.kernel_zygote.empty()) {
    std::string variable = differs_from_kernel_zygote(command_environment(sandbox_env(), {}));
    if (record_.spec.memory_merge) why_not = "memory merging execs its kernel without address-space randomisation";
    else if (!group_signals) why_not = "no pidfd signal to a process group on this host (Linux 6.9)";
    else if (zygote_timed_out_) why_not = "a kernel from the zygote did not get ready in time before";
    else if (!variable.empty()) why_not = "its environment sets " + variable + ", which a kernel reads at its start";
    if (why_not.empty()) {
      auto forked = fork_kernel_from_zygote(fds);
      if (forked) {
        kernel_origin_ = "zygote";
        kernel_zygote_fallback_.clear();
        return forked;
      }
      // A kernel that did not get ready in time was stopped on its way (by the sandbox, or
      // a host too loaded): this sandbox's kernels start through init from now on, so its
      // supervisor is never held that long again (the third review's L1).
      if (forked.error().code == ErrorCode::kTimeout) zygote_timed_out_ = true;
      why_not = forked.error().message;
      log::limited(log::Level::kWarn, "kernel-zygote", "the kernel starts through init: " + why_not);
    }
  }
  auto spawned = spawn_in_sandbox(argv, fds);
  if (spawned) {
    kernel_origin_ = "init";
    kernel_zygote_fallback_ = why_not;
  }
  return spawned;
}

Result<uint64_t> Supervisor::fork_kernel_from_zygote(const std::vector<std::pair<std::string, int>>& fds) {
  ZygoteKernelRequest request;
  request.socket = launch_.kernel_zygote;
  request.sandbox_id = record_.id;
  request.init_pidfd = instance_->pidfd();
  request.cgroup_files = NSBOX_TRY(instance_->cgroup_join_files());
  for (const auto& [name, fd] : fds) {
    if (name == "stdout") request.stdout_fd = fd;
    if (name == "stderr") request.stderr_fd = fd;
    if (name == "fd3") request.channel = fd;
  }
  request.env = command_environment(sandbox_env(), {});
  request.cwd = working_dir("");
  for (const auto& name : record_.spec.preload) request.preload += (request.preload.empty() ? "" : ",") + name;
  auto kernel = NSBOX_TRY(start_zygote_kernel(std::move(request)));
  pid_t sandbox_pid = kernel.sandbox_pid;
  uint64_t id = next_command_id_++;
  NSBOX_CHECK(zygote_kernels_->adopt(id, std::move(kernel)));
  // As init's "started" would: after the session has taken the id.
  loop_->defer([this, id, sandbox_pid] {
    if (kernel_->owns(id)) kernel_->on_started(sandbox_pid);
  });
  return id;
}

Result<uint64_t> Supervisor::spawn_in_sandbox(const std::vector<std::string>& argv,
                                              const std::vector<std::pair<std::string, int>>& fds) {
  uint64_t id = next_command_id_++;
  Json names = Json::array();
  std::vector<int> raw;
  for (const auto& [name, fd] : fds) {
    names.push_back(name);
    raw.push_back(fd);
  }
  Json spawn = NSBOX_TRY(spawn_request(id, {argv, {}, "", ""}, names));  // as user
  NSBOX_CHECK(protocol::send_frame(instance_->control_fd(), spawn, raw));
  return id;
}

// A terminal of the sandbox's own devpts instance: its ptmx, reached through init's root
// without following anything the sandbox could have put on the way.
Result<UniqueFd> Supervisor::open_pty_master() {
  std::string root_path = "/proc/" + std::to_string(instance_->init_pid()) + "/root";
  UniqueFd root(::open(root_path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root) return fail(sys_error("open " + root_path));
  open_how how{};
  how.flags = O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  UniqueFd master(static_cast<int>(sys::retry_eintr([&] { return ::syscall(SYS_openat2, root.get(), "dev/pts/ptmx", &how, sizeof how); })));
  if (!master) return fail(sys_error("open the sandbox's /dev/pts/ptmx"));
  return master;
}

Result<uint64_t> Supervisor::spawn_on_tty(const Launch& launch, int slave) { return spawn_process(launch, {slave, slave, slave}, true); }

Result<uint64_t> Supervisor::spawn_with_stdio(const Launch& launch, int in, int out, int err) {
  return spawn_process(launch, {in, out, err}, false);
}

// A command line given as one string runs in bash (every face says `/bin/bash -c`); an
// image without bash (busybox, distroless with a shell) runs it in its /bin/sh. Decided
// from the image's tree at the start, never through the sandbox's root (which the sandbox
// could route through a slow mount).
std::vector<std::string> Supervisor::shell_of_image(const std::vector<std::string>& argv) const {
  if (image_has_bash_ || argv.size() != 3 || argv[0] != "/bin/bash" || argv[1] != "-c") return argv;
  return {"/bin/sh", "-c", argv[2]};
}

Result<Json> Supervisor::spawn_request(uint64_t id, const Launch& launch, const Json& fd_names) const {
  const SandboxAccounts& accounts = record_.spec.accounts;
  EnvList env;
  Json identity;
  Identity who = NSBOX_TRY(accounts.identity(launch.run_as));
  // A sandbox without accounts starts everything as user: its init can switch to no one.
  if (!accounts.empty()) identity = who.to_json();
  if (who.name != "user") {
    const std::string home = SandboxAccounts::home_of(who.name);
    env = {{"USER", who.name}, {"LOGNAME", who.name}, {"HOME", home}, {"PYTHONUSERBASE", home + "/.local"}};
  }
  env.insert(env.end(), launch.env.begin(), launch.env.end());
  Json spawn = {{"op", "spawn"}, {"id", id}, {"argv", shell_of_image(launch.argv)}, {"env", command_environment(sandbox_env(), env)},
                {"cwd", working_dir(launch.cwd)}, {"fds", fd_names}};
  if (!identity.is_null()) spawn["identity"] = std::move(identity);
  return spawn;
}

// A command of its own session and process group (init's spawn), with exactly `stdio`.
Result<uint64_t> Supervisor::spawn_process(const Launch& launch, const std::vector<int>& stdio, bool tty) {
  Json spawn = NSBOX_TRY(spawn_request(next_command_id_, launch, {"stdin", "stdout", "stderr"}));
  spawn["tty"] = tty;
  uint64_t id = next_command_id_++;
  NSBOX_CHECK(protocol::send_frame(instance_->control_fd(), spawn, stdio));
  return id;
}

void Supervisor::signal_in_sandbox(uint64_t command_id, int signal, bool whole_group) {
  if (zygote_kernels_->owns(command_id)) return zygote_kernels_->signal(command_id, signal, whole_group);
  (void)protocol::send_frame(instance_->control_fd(),
                             {{"op", "signal"}, {"id", command_id}, {"signal", signal}, {"group", whole_group}});
}

std::string Supervisor::oom_message() const {
  return "killed by the OOM killer: the sandbox's memory limit is " + format_bytes(instance_->limits().memory_bytes) +
         " (size " + std::string(size_tier_name(instance_->size())) + ")";
}

void Supervisor::send_to_client(int client_fd, const Json& message) {
  auto it = clients_.find(client_fd);
  if (it != clients_.end()) reply(it->second, message);  // reply() ignores closed clients
}

}  // namespace nsbox
