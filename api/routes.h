// The HTTP API's routes: one table (api/routes.cc) of method, path pattern, handler, who
// may call the route, what it works on, and what its body and answer are. ApiService
// dispatches by it, and decides from it whether a request needs a token and whether its
// body is a file; api/openapi.yaml documents the same routes, and
// tests/unit/route_table_test.cc fails when the two lists differ.
//
// A pattern is literal segments and `{name}` parameters ("/v1/sandboxes/{id}/pty/{pty}/
// output"); a parameter matches one non-empty segment, as sent (percent-decoded). Empty
// segments of a request's path are dropped ("/v1//info/" is "/v1/info"), as they always
// were. A path that no route matches, or matches with another method, is 404 `not_found`
// ("no endpoint").
//
// Every route below a sandbox (/v1/sandboxes/{id}/X) is also a session's
// (/v1/sessions/{sid}/X, on the session's sandbox): the table adds those twins itself.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "api/exchange.h"

namespace nsbox::api {

class ApiService;
struct Session;

// Who may call a route.
enum class Auth : uint8_t {
  kNone,   // anybody: the probes and the metrics' scrape (counts only: no id, name or content)
  kToken,  // the client's bearer token: what is the server's own (creates, lists, pool, drain, info)
  // The client's token, or the peer token on a request another server of the cluster
  // relayed (X-Nsbox-Forwarded-By): what a sharded server relays to a sandbox's owner.
  kPeerRelayable,
  // As kPeerRelayable, or no token at all with `?signature=` (the handler checks the link's
  // signature and expiry): a download link.
  kSignedLink,
};

// What a route works on, and so what happens before its handler runs.
enum class Scope : uint8_t {
  kServer,  // the server's own
  // /v1/sandboxes/{id}...: relayed to the server that holds {id} (410 once a drain moved
  // it), counted while it runs (a drain waits for it), refused on a warm pool's free member.
  kSandbox,
  kSession,  // /v1/sessions/{sid}...: relayed to the session's server, the session loaded (404)
  // /v1/sessions/{sid}/X: as kSession, then the session's sandbox (made on first use), then
  // as kSandbox.
  kSessionSandbox,
};

enum class Body : uint8_t {
  kJson,  // read whole before the handler (16 MiB at most); empty is {}; many routes take none
  kFile,  // the bytes of a file, streamed to the handler (--max-upload)
};

enum class Answer : uint8_t {
  kJson,          // one JSON document
  kJsonOrStream,  // one JSON document, or NDJSON events with Accept: application/x-ndjson
  kStream,        // NDJSON events
  kFile,          // a file's bytes (application/octet-stream)
  kText,          // text (the metrics)
};

// Which of the HTTP server's budgets of requests in work a route draws from
// (api/request_budgets.h). A download link admitted by its signature alone draws from the
// open budget whatever its row says.
enum class Budget : uint8_t {
  kRequests,  // the token holders'
  kProbes,    // the probes' own: never behind any other request
  kOpen,      // requests without a token, each route (or sandbox, for links) with its share
};

// What a handler is given besides the exchange.
struct Call {
  std::string sandbox;         // kSandbox: as asked (id or name); kSessionSandbox: the session's sandbox's id
  std::string_view arg;        // the route's own parameter ({tool}, {call_id}, {pty}, {snapshot}); "" if none
  Session* session = nullptr;  // kSession
};

using Handler = void (ApiService::*)(Exchange&, const Call&);

struct Route {
  std::string_view method;  // "GET", "POST", "PUT", "PATCH", "DELETE"
  std::string pattern;
  Handler handler;
  Auth auth;
  Scope scope = Scope::kServer;
  Body body = Body::kJson;
  Answer answer = Answer::kJson;
  // A warm pool's free member is nobody's yet: only routes that read it alone (inspect)
  // may touch it (others answer 403).
  bool free_member_ok = false;
  Budget budget = Budget::kRequests;
};

constexpr size_t kMaxRouteSegments = 8;

struct RouteMatch {
  const Route* route = nullptr;  // null: no endpoint
  std::array<std::string_view, 2> params{};  // the pattern's parameters, in order (views of the path)
};

class RouteTable {
 public:
  // The rows as written; their sessions' twins are added after them.
  explicit RouteTable(std::vector<Route> rows);
  RouteTable(const RouteTable&) = delete;
  RouteTable& operator=(const RouteTable&) = delete;

  // No allocation: the path is cut into views, compared with each pattern's.
  RouteMatch match(std::string_view method, std::string_view path) const;
  std::span<const Route> routes() const { return routes_; }

 private:
  struct Shape {
    std::array<std::string_view, kMaxRouteSegments> segments;  // views of routes_[i].pattern
    uint8_t count = 0;
  };
  std::vector<Route> routes_;  // never changed after construction: shapes_ point into it
  std::vector<Shape> shapes_;
};

}  // namespace nsbox::api
