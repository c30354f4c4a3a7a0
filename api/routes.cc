#include "api/routes.h"

#include <cstdlib>

#include "api/api_service.h"

namespace nsbox::api {
namespace {

constexpr std::string_view kSandboxPrefix = "/v1/sandboxes/{id}/";
constexpr std::string_view kSessionPrefix = "/v1/sessions/{sid}/";

bool is_parameter(std::string_view segment) { return segment.size() > 2 && segment.front() == '{' && segment.back() == '}'; }

// The segments of `path` (empty ones dropped) into `out`; false when there are more than
// it holds (no route is that deep).
bool cut(std::string_view path, std::array<std::string_view, kMaxRouteSegments>& out, uint8_t& count) {
  count = 0;
  for (size_t at = 0; at < path.size();) {
    size_t slash = path.find('/', at);
    if (slash == std::string_view::npos) slash = path.size();
    if (slash > at) {
      if (count == kMaxRouteSegments) return false;
      out[count++] = path.substr(at, slash - at);
    }
    at = slash + 1;
  }
  return true;
}

}  // namespace

RouteTable::RouteTable(std::vector<Route> rows) : routes_(std::move(rows)) {
  const size_t written = routes_.size();
  for (size_t i = 0; i < written; ++i) {
    const Route& r = routes_[i];
    if (r.scope != Scope::kSandbox || !r.pattern.starts_with(kSandboxPrefix)) continue;
    Route twin = r;
    twin.pattern = std::string(kSessionPrefix) + r.pattern.substr(kSandboxPrefix.size());
    twin.scope = Scope::kSessionSandbox;
    // A link signs a sandbox's id and path: it opens /v1/sandboxes/{id}/files only.
    if (twin.auth == Auth::kSignedLink) twin.auth = Auth::kPeerRelayable;
    routes_.push_back(std::move(twin));
  }
  shapes_.resize(routes_.size());
  for (size_t i = 0; i < routes_.size(); ++i) {
    size_t params = 0;
    if (!cut(routes_[i].pattern, shapes_[i].segments, shapes_[i].count)) std::abort();  // a table row deeper than kMaxRouteSegments
    for (uint8_t s = 0; s < shapes_[i].count; ++s) params += is_parameter(shapes_[i].segments[s]);
    if (params > RouteMatch{}.params.size()) std::abort();  // a row with more parameters than a match holds
  }
}

RouteMatch RouteTable::match(std::string_view method, std::string_view path) const {
  std::array<std::string_view, kMaxRouteSegments> segments;
  uint8_t count = 0;
  if (!cut(path, segments, count)) return {};
  for (size_t i = 0; i < routes_.size(); ++i) {
    const Shape& shape = shapes_[i];
    if (shape.count != count || routes_[i].method != method) continue;
    RouteMatch m{&routes_[i], {}};
    size_t param = 0;
    bool same = true;
    for (uint8_t s = 0; s < count && same; ++s) {
      if (is_parameter(shape.segments[s])) m.params[param++] = segments[s];
      else same = shape.segments[s] == segments[s];
    }
    if (same) return m;
  }
  return {};
}

// The API's endpoints (docs/api.md explains them; api/openapi.yaml is their contract).
// Handlers live in api_service.cc (sandboxes, sessions, snapshots), pty_routes.cc, process_routes.cc, port_routes.cc, run_routes.cc
// (cells, commands, tools), file_routes.cc (files, fs) and cluster_routes.cc (probes,
// metrics, drain).
const RouteTable& ApiService::routes() {
  using S = ApiService;
  using A = Auth;
  using Sc = Scope;
  static const RouteTable table({
      // Probes and the scrape: no token.
      {"GET", "/livez", &S::livez, A::kNone, Sc::kServer, Body::kJson, Answer::kJson, false, Budget::kProbes},
      {"GET", "/readyz", &S::readyz, A::kNone, Sc::kServer, Body::kJson, Answer::kJson, false, Budget::kProbes},
      {"GET", "/metrics", &S::metrics_route, A::kNone, Sc::kServer, Body::kJson, Answer::kText, false, Budget::kOpen},
      // The server's own.
      {"GET", "/v1/info", &S::info, A::kToken},
      {"POST", "/v1/drain", &S::drain_route, A::kToken},
      {"GET", "/v1/pool", &S::pool_status, A::kToken},
      {"PUT", "/v1/pool", &S::set_pool, A::kToken},
      {"POST", "/v1/sandboxes", &S::create_sandbox, A::kToken},
      {"GET", "/v1/sandboxes", &S::list_sandboxes, A::kToken},
      // Snapshots: taken where their sandbox is (the handler relays), kept in a store every
      // server shares.
      {"POST", "/v1/snapshots", &S::take_snapshot, A::kPeerRelayable},
      {"GET", "/v1/snapshots", &S::list_snapshots, A::kToken},
      {"GET", "/v1/snapshots/{snapshot}", &S::get_snapshot, A::kToken},
      {"DELETE", "/v1/snapshots/{snapshot}", &S::delete_snapshot, A::kToken},
      // A sandbox.
      {"GET", "/v1/sandboxes/{id}", &S::inspect_sandbox, A::kPeerRelayable, Sc::kSandbox, Body::kJson, Answer::kJson, true},
      {"PATCH", "/v1/sandboxes/{id}", &S::patch_sandbox, A::kPeerRelayable, Sc::kSandbox},
      {"DELETE", "/v1/sandboxes/{id}", &S::delete_sandbox, A::kPeerRelayable, Sc::kSandbox},
      {"POST", "/v1/sandboxes/{id}/interrupt", &S::interrupt_sandbox, A::kPeerRelayable, Sc::kSandbox},
      {"POST", "/v1/sandboxes/{id}/restart", &S::restart_sandbox, A::kPeerRelayable, Sc::kSandbox},
      {"POST", "/v1/sandboxes/{id}/stop", &S::stop_sandbox, A::kPeerRelayable, Sc::kSandbox},
      {"POST", "/v1/sandboxes/{id}/start", &S::start_sandbox, A::kPeerRelayable, Sc::kSandbox},
      {"POST", "/v1/sandboxes/{id}/ttl", &S::set_ttl, A::kPeerRelayable, Sc::kSandbox},
      {"POST", "/v1/sandboxes/{id}/cells", &S::run_cell, A::kPeerRelayable, Sc::kSandbox, Body::kJson, Answer::kJsonOrStream},
      {"POST", "/v1/sandboxes/{id}/commands", &S::run_command, A::kPeerRelayable, Sc::kSandbox, Body::kJson, Answer::kJsonOrStream},
      // Files of /mnt/files; a download is also a signed link's.
      {"PUT", "/v1/sandboxes/{id}/files", &S::put_file, A::kPeerRelayable, Sc::kSandbox, Body::kFile},
      {"GET", "/v1/sandboxes/{id}/files", &S::get_file, A::kSignedLink, Sc::kSandbox, Body::kJson, Answer::kFile},
      {"DELETE", "/v1/sandboxes/{id}/files", &S::delete_file, A::kPeerRelayable, Sc::kSandbox},
      {"GET", "/v1/sandboxes/{id}/files:ls", &S::list_files, A::kPeerRelayable, Sc::kSandbox},
      {"POST", "/v1/sandboxes/{id}/files:sign", &S::sign_file, A::kPeerRelayable, Sc::kSandbox},
      // Any path of the sandbox's view, with its user's rights.
      {"GET", "/v1/sandboxes/{id}/fs", &S::fs_get, A::kPeerRelayable, Sc::kSandbox, Body::kJson, Answer::kFile},
      {"PUT", "/v1/sandboxes/{id}/fs", &S::fs_put, A::kPeerRelayable, Sc::kSandbox, Body::kFile},
      {"DELETE", "/v1/sandboxes/{id}/fs", &S::fs_delete, A::kPeerRelayable, Sc::kSandbox},
      {"GET", "/v1/sandboxes/{id}/fs:ls", &S::fs_list, A::kPeerRelayable, Sc::kSandbox},
      {"GET", "/v1/sandboxes/{id}/fs:stat", &S::fs_stat, A::kPeerRelayable, Sc::kSandbox},
      {"POST", "/v1/sandboxes/{id}/fs:mkdir", &S::fs_mkdir, A::kPeerRelayable, Sc::kSandbox},
      {"PUT", "/v1/sandboxes/{id}/fs:extract", &S::fs_extract, A::kPeerRelayable, Sc::kSandbox, Body::kFile},
      // The workspace root as one tar archive.
      {"GET", "/v1/sandboxes/{id}/workspace.tar", &S::workspace_get, A::kPeerRelayable, Sc::kSandbox, Body::kJson, Answer::kFile},
      {"PUT", "/v1/sandboxes/{id}/workspace.tar", &S::workspace_put, A::kPeerRelayable, Sc::kSandbox, Body::kFile},
      // PTY sessions.
      {"POST", "/v1/sandboxes/{id}/pty", &S::pty_start, A::kPeerRelayable, Sc::kSandbox},
      {"DELETE", "/v1/sandboxes/{id}/pty", &S::pty_kill_all, A::kPeerRelayable, Sc::kSandbox},
      {"DELETE", "/v1/sandboxes/{id}/pty/{pty}", &S::pty_kill, A::kPeerRelayable, Sc::kSandbox},
      {"GET", "/v1/sandboxes/{id}/pty/{pty}/output", &S::pty_output, A::kPeerRelayable, Sc::kSandbox},
      {"POST", "/v1/sandboxes/{id}/pty/{pty}/input", &S::pty_input, A::kPeerRelayable, Sc::kSandbox},
      {"POST", "/v1/sandboxes/{id}/pty/{pty}/resize", &S::pty_resize, A::kPeerRelayable, Sc::kSandbox},
      // Processes that outlive a request, named by their pid in the sandbox.
      {"POST", "/v1/sandboxes/{id}/processes", &S::process_start, A::kPeerRelayable, Sc::kSandbox},
      {"GET", "/v1/sandboxes/{id}/processes", &S::process_list, A::kPeerRelayable, Sc::kSandbox},
      {"DELETE", "/v1/sandboxes/{id}/processes/{pid}", &S::process_remove, A::kPeerRelayable, Sc::kSandbox},
      {"GET", "/v1/sandboxes/{id}/processes/{pid}/output", &S::process_output, A::kPeerRelayable, Sc::kSandbox, Body::kJson,
       Answer::kStream},
      {"POST", "/v1/sandboxes/{id}/processes/{pid}/input", &S::process_input, A::kPeerRelayable, Sc::kSandbox},
      {"POST", "/v1/sandboxes/{id}/processes/{pid}/signal", &S::process_signal, A::kPeerRelayable, Sc::kSandbox},
      // Port forwards: a loopback port of the server's machine per forwarded port.
      {"POST", "/v1/sandboxes/{id}/ports", &S::port_open, A::kPeerRelayable, Sc::kSandbox},
      {"GET", "/v1/sandboxes/{id}/ports", &S::port_list, A::kPeerRelayable, Sc::kSandbox},
      {"DELETE", "/v1/sandboxes/{id}/ports/{port}", &S::port_close, A::kPeerRelayable, Sc::kSandbox},
      // Tools: the hosted workbench tools, and the tool bridge's callback backend.
      {"POST", "/v1/sandboxes/{id}/tools/{tool}", &S::run_workbench_tool, A::kPeerRelayable, Sc::kSandbox},
      {"GET", "/v1/sandboxes/{id}/events", &S::tool_events, A::kPeerRelayable, Sc::kSandbox, Body::kJson, Answer::kStream},
      {"POST", "/v1/sandboxes/{id}/tool_calls/{call_id}", &S::answer_tool_call, A::kPeerRelayable, Sc::kSandbox},
      // Sessions (their sandbox's routes are the twins of those above).
      {"POST", "/v1/sessions", &S::create_session, A::kToken},
      {"GET", "/v1/sessions", &S::list_sessions, A::kToken},
      {"GET", "/v1/sessions/{sid}", &S::get_session, A::kPeerRelayable, Sc::kSession},
      {"PATCH", "/v1/sessions/{sid}", &S::patch_session, A::kPeerRelayable, Sc::kSession},
      {"DELETE", "/v1/sessions/{sid}", &S::delete_session, A::kPeerRelayable, Sc::kSession},
      {"GET", "/v1/sessions/{sid}/sandbox", &S::session_sandbox, A::kPeerRelayable, Sc::kSession},
  });
  return table;
}

}  // namespace nsbox::api
