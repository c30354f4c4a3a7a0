// The HTTP API's endpoints (docs/api.md): routing, and one method per endpoint. Called
// on worker threads with one Exchange per request; everything here may block. Knows
// nothing of HTTP's wire format (api/http_server.cc does), only of requests, JSON and the
// client library (runtime/client/runtime.h).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <utility>
#include <string>
#include <vector>

#include "api/access.h"
#include "api/cluster.h"
#include "api/exchange.h"
#include "api/port_proxy.h"
#include "api/metrics.h"
#include "api/peer_client.h"
#include "api/request_budgets.h"
#include "api/routes.h"
#include "api/sessions.h"
#include "api/warm_pool.h"
#include "kernel/zygote_keeper/kernel_zygote_process.h"
#include "runtime/client/runtime.h"

namespace nsbox::api {

struct ApiConfig {
  uint64_t max_upload_bytes = 100ull << 20;
  std::string public_url;  // the base of download links ("" -> links are paths)
};

constexpr uint64_t kMaxJsonBody = 16ull << 20;
constexpr uint64_t kMaxCodeBytes = 12ull << 20;
constexpr uint64_t kMaxDownloadBytes = 10ull << 30;
constexpr int64_t kMaxLinkSeconds = 7 * 24 * 3600;

class ApiService {
 public:
  ApiService(Runtime runtime, BearerToken token, LinkSigner signer, SessionStore sessions, ApiConfig config)
      : runtime_(std::move(runtime)), token_(std::move(token)), signer_(std::move(signer)),
        sessions_(std::move(sessions)), config_(std::move(config)) {}

  // Answers one request (exactly once).
  void handle(Exchange& x);

  // For the HTTP side, before a body is read, from the request's route: whether it may
  // be served at all (its token, or a route that needs none: nobody without the token can
  // make the server read or hold a body), whether its body is a file to stream (Body::
  // kFile: PUT of files, fs, fs:extract), and which budget of requests in work it takes
  // (`budget_key`: the share within the open budget, the route or a link's sandbox).
  struct Intake {
    bool admitted = false;
    bool upload = false;
    RequestBudgets::Kind budget = RequestBudgets::Kind::kRequest;
    std::string budget_key;
    bool tunnel = false;  // a sandbox's port (api/port_proxy.h): no body is read for it
  };
  Intake intake(const HttpRequest& r) const;
  bool takes_upload(const HttpRequest& r) const { return intake(r).upload; }
  bool admits(const HttpRequest& r) const { return intake(r).admitted; }
  // Every route the service answers (api/routes.cc).
  static const RouteTable& routes();
  uint64_t max_upload_bytes() const { return config_.max_upload_bytes; }

  void set_stopping() { stopping_ = true; }
  // `serve --warm`: starts the pool's refill; stop_pool() removes its free members.
  void start_pool(WarmPoolConfig config);
  void stop_pool();
  void set_public_url(std::string url) { config_.public_url = std::move(url); }
  // Requests whose Host is {P}-{id}.{domain} reach that sandbox's port P ("" for none).
  void set_port_domain(std::string domain) { port_domain_ = std::move(domain); }
  // The server's kernel zygote (null: none started), for /metrics; it outlives the serving.
  void set_kernel_zygote(const KernelZygoteProcess* zygote) { kernel_zygote_ = zygote; }

  // Sharded serve (api/cluster_routes.cc, docs/semantics.md "Sharded serve"): before
  // serving. `stop_server` ends the HTTP server gracefully (a drain calls it when done).
  void set_cluster(ClusterConfig cluster, std::function<void()> stop_server);
  // SIGTERM or SIGINT: true when the service takes it as the start of a drain (a sharded
  // server) and the HTTP server must go on serving until the drain stops it.
  bool on_stop_signal();
  // After the server stopped: a drain that kept sandboxes here (their snapshot failed).
  bool drain_failed() const { return drain_kept_ > 0; }

 private:
  // Routing (api/routes.cc): who may call what, and what runs before a handler.
  bool authorized(const HttpRequest& r, const Route* route) const;
  // Admitted by a token (the client's, or a peer's on a relayed request), not by a
  // download link's signature alone. Asked only on routes peers may relay.
  bool credentialed(const HttpRequest& r) const;
  void dispatch(Exchange& x, const RouteMatch& m);
  // A sandbox's route: relayed to its server, counted for a drain, a free member refused.
  void sandbox_call(Exchange& x, const Route& route, const Call& call);
  void session_call(Exchange& x, const Route& route, const RouteMatch& m);

  void livez(Exchange& x, const Call&);
  void readyz(Exchange& x, const Call&);
  void info(Exchange& x, const Call&);
  void create_sandbox(Exchange& x, const Call&);
  void pool_status(Exchange& x, const Call&);
  void set_pool(Exchange& x, const Call&);
  // A warm pool's member claimed for a create it can serve (`warm_ok`), else one built
  // for it (the cold path); the record's create_path says which.
  Result<SandboxInfo> make_sandbox(const CreateOptions& options, bool warm_ok);
  void list_sandboxes(Exchange& x, const Call&);
  void inspect_sandbox(Exchange& x, const Call& c);
  void patch_sandbox(Exchange& x, const Call& c);
  void set_ttl(Exchange& x, const Call& c);
  void delete_sandbox(Exchange& x, const Call& c);
  void interrupt_sandbox(Exchange& x, const Call& c);
  void restart_sandbox(Exchange& x, const Call& c);
  void stop_sandbox(Exchange& x, const Call& c);
  void start_sandbox(Exchange& x, const Call& c);

  // Snapshots and sessions (api/session_routes.cc).
  void take_snapshot(Exchange& x, const Call&);
  void list_snapshots(Exchange& x, const Call&);
  void get_snapshot(Exchange& x, const Call& c);
  void delete_snapshot(Exchange& x, const Call& c);
  void create_session(Exchange& x, const Call&);
  void list_sessions(Exchange& x, const Call&);
  void get_session(Exchange& x, const Call& c);
  void patch_session(Exchange& x, const Call& c);
  void delete_session(Exchange& x, const Call& c);
  void session_sandbox(Exchange& x, const Call& c);
  // The session's sandbox, made now if this is its first use.
  Result<std::string> sandbox_of_session(const std::string& sid);

  // PTY sessions (api/pty_routes.cc).
  void pty_start(Exchange& x, const Call& c);
  void pty_kill_all(Exchange& x, const Call& c);
  void pty_kill(Exchange& x, const Call& c);
  void pty_output(Exchange& x, const Call& c);
  void pty_input(Exchange& x, const Call& c);
  void pty_resize(Exchange& x, const Call& c);

  // Processes that outlive a request (api/process_routes.cc).
  void process_start(Exchange& x, const Call& c);
  void process_list(Exchange& x, const Call& c);
  void process_output(Exchange& x, const Call& c);
  void process_input(Exchange& x, const Call& c);
  void process_signal(Exchange& x, const Call& c);
  void process_remove(Exchange& x, const Call& c);

  // Port forwards (api/port_routes.cc).
  void port_open(Exchange& x, const Call& c);
  void port_list(Exchange& x, const Call& c);
  void port_close(Exchange& x, const Call& c);
  void port_tunnel(Exchange& x, const TunnelTarget& t);

  // api/cluster_routes.cc
  bool ready(std::string& reason) const;
  // Sandboxes on this machine: every one of the state root (stopped, dead and warm
  // members included: they hold memory or disk), and those being made.
  uint64_t sandboxes_here() const;
  uint64_t free_members() const;
  // A sandbox about to be made here (a create, a session's first call): counted from
  // admission until made, so that concurrent creates cannot pass --capacity together;
  // refused (503, Retry-After) while draining or full. `warm` when a free member of its
  // size can serve it (a claim adds no sandbox).
  class Admission {
   public:
    explicit Admission(ApiService* s) : s_(s) {}
    Admission(Admission&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
    Admission& operator=(Admission&&) = delete;
    ~Admission();

   private:
    ApiService* s_;
  };
  Result<Admission> admit(std::optional<SizeTier> warm);
  bool reserve_for_pool();
  // A request for another server's sandbox is relayed there (true: answered).
  bool forward_if_elsewhere(Exchange& x, const std::string& sandbox);
  bool forward_to(Exchange& x, const std::string& shard, const std::string& sandbox);
  // 404 for a sandbox of ours that a drain moved: 410 with its snapshot.
  bool answer_if_moved(Exchange& x, const std::string& sandbox);
  void metrics_route(Exchange& x, const Call&);
  void drain_route(Exchange& x, const Call&);
  bool begin_drain();
  void drain();

  // api/run_routes.cc
  void run_cell(Exchange& x, const Call& c);
  void run_command(Exchange& x, const Call& c);
  void run_workbench_tool(Exchange& x, const Call& c);
  void hand_links(CreateOptions& options) const;
  void tool_events(Exchange& x, const Call& c);
  void answer_tool_call(Exchange& x, const Call& c);

  // api/file_routes.cc
  void put_file(Exchange& x, const Call& c);
  void get_file(Exchange& x, const Call& c);
  // A signed link's signature and expiry, for `sandbox` (403 when altered or expired).
  Result<void> check_link(const HttpRequest& r, const std::string& sandbox) const;
  void delete_file(Exchange& x, const Call& c);
  void list_files(Exchange& x, const Call& c);
  void sign_file(Exchange& x, const Call& c);
  void fs_get(Exchange& x, const Call& c);
  void fs_put(Exchange& x, const Call& c);
  void fs_delete(Exchange& x, const Call& c);
  void fs_list(Exchange& x, const Call& c);
  void fs_stat(Exchange& x, const Call& c);
  void fs_mkdir(Exchange& x, const Call& c);
  void fs_extract(Exchange& x, const Call& c);
  // A streamed request body (an archive) held whole in an unnamed file of the server's,
  // up to its upload limit, rewound.
  Result<UniqueFd> spool_body(Exchange& x) const;
  void workspace_get(Exchange& x, const Call& c);
  void workspace_put(Exchange& x, const Call& c);

  Runtime runtime_;
  BearerToken token_;
  LinkSigner signer_;
  SessionStore sessions_;
  ApiConfig config_;
  std::atomic<bool> stopping_ = false;
  std::string port_domain_;
  std::shared_ptr<TunnelCount> tunnels_ = std::make_shared<TunnelCount>();
  std::unique_ptr<WarmPool> pool_;
  std::atomic<int> running_calls_ = 0;  // cells and commands in flight: the pool's refill yields
  std::atomic<int> running_cells_ = 0;

  // Sharded serve.
  ClusterConfig cluster_;
  mutable std::mutex admit_mutex_;
  uint64_t creating_ = 0;  // admitted and not made yet (admit_mutex_)
  std::atomic<int> relays_ = 0;      // requests relayed to peers, in flight (a drain waits for them too)
  std::atomic<int> stop_signals_ = 0;  // signals seen while draining
  std::atomic<bool> hurry_ = false;     // a second signal: the drain's grace ends
  std::atomic<size_t> drain_kept_ = 0;
  std::optional<BearerToken> peer_token_;
  std::unique_ptr<PeerClient> peers_;
  std::function<void()> stop_server_;
  Metrics metrics_;
  // The scrape's census of the state root (every record read): taken at most once a
  // second, however often /metrics is asked (it needs no token).
  // Taken again after a request of this server that may have changed them (anything but a
  // GET: census_generation_); a sandbox made or removed by another (the CLI) shows within
  // a second.
  std::atomic<uint64_t> census_generation_ = 1;
  struct Census {
    std::mutex mutex;
    uint64_t generation = 0;
    std::chrono::steady_clock::time_point taken{};
    std::map<std::string, std::map<std::string, uint64_t>> sandboxes;
    uint64_t active = 0;
  } census_;
  std::atomic<bool> draining_ = false;
  const KernelZygoteProcess* kernel_zygote_ = nullptr;
  // Requests in flight per sandbox, and the sandboxes a drain has closed to new ones: a
  // sandbox is snapshotted only once nothing acknowledged can still change it.
  struct Gate {
    std::mutex mutex;
    std::condition_variable idle;
    std::map<std::string, int> in_flight;
    std::set<std::string> closed;
  } gate_;
};

// Helpers shared by the route files.
void respond_error(Exchange& x, const Error& e);
Error unauthorized_error();
// The request's JSON body: {} when empty; an object, else malformed_request.
Result<Json> body_object(const HttpRequest& r);
// Refuses a field that is not one of `known`.
Result<void> only_fields(const Json& j, std::initializer_list<const char*> known);
// A JSON number of seconds in (0, 86400], or the default.
Result<double> timeout_field(const Json& j, double fallback);
// The bytes of `name` (text) or `name`_b64 (base64), one of the two; "" when absent and
// not `required`.
Result<std::string> bytes_field(const Json& j, const char* name, bool required);
// A command's argv from "command" (a bash line) or "argv", exactly one of them.
Result<Json> command_argv(const Json& body);

}  // namespace nsbox::api
