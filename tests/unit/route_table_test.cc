// The HTTP API's route table (api/routes.h) and its contract (api/openapi.yaml): the two
// list the same routes with the same authority, streams and file bodies; a request's path
// finds its route and its parameters; and the service's decisions before a body is read
// (ApiService::admits, takes_upload) follow the table.
//
// api/openapi.yaml is read by a small line reader of its `paths:` section, which relies
// on the document's layout: a path at two spaces ("  /v1/info:"), an operation at four
// ("    get:"), its `security:` at six on one line in flow style, or absent for the
// document's default (the client's token).
#include <stdlib.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "api/api_service.h"
#include "api/request_target.h"
#include "tests/support/temp_dir.h"

namespace {

using nsbox::api::Answer;
using nsbox::api::ApiService;
using nsbox::api::Auth;
using nsbox::api::Body;
using nsbox::api::Route;

// The operation's `security:` for each kind of authority (the document's default, the
// client's token, is written by leaving it out).
const std::map<Auth, std::string> kSecurity = {
    {Auth::kNone, "[]"},
    {Auth::kToken, ""},
    {Auth::kPeerRelayable, "[{bearer: []}, {peer_token: [], forwarded_by: []}]"},
    {Auth::kSignedLink, "[{bearer: []}, {peer_token: [], forwarded_by: []}, {signed_link: []}]"},
};

struct Operation {
  std::string method;  // upper case
  std::string path;
  std::string security;  // as written; "" when absent
  std::string text;      // the operation's lines
  int line = 0;
};

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.pop_back();
  size_t start = s.find_first_not_of(' ');
  return start == std::string::npos ? "" : s.substr(start);
}

size_t indent(const std::string& line) { return line.find_first_not_of(' '); }

std::vector<Operation> document_operations(const std::string& file) {
  std::ifstream in(file);
  REQUIRE(in.good());
  static const std::set<std::string> kMethods = {"get", "put", "post", "patch", "delete", "head", "options", "trace"};
  std::vector<Operation> ops;
  std::string line, path;
  bool in_paths = false;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line == "paths:") {
      in_paths = true;
      continue;
    }
    if (!in_paths || trim(line).empty() || trim(line)[0] == '#') continue;
    size_t depth = indent(line);
    if (depth == 0) break;  // the next top-level key
    if (depth == 2) {
      INFO("api/openapi.yaml:" << number << ": " << line);
      REQUIRE((line[2] == '/' && line.back() == ':'));
      path = line.substr(2, line.size() - 3);
      continue;
    }
    std::string word = trim(line);
    if (depth == 4 && word.back() == ':' && kMethods.count(word.substr(0, word.size() - 1))) {
      std::string method = word.substr(0, word.size() - 1);
      for (char& c : method) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      ops.push_back({method, path, "", "", number});
      continue;
    }
    if (depth == 4) continue;  // the path's parameters, summary, ...
    if (ops.empty() || ops.back().path != path) continue;
    if (depth == 6 && word.starts_with("security:")) ops.back().security = trim(word.substr(9));
    ops.back().text += line + "\n";
  }
  return ops;
}

// Whether the operation has a content of this media type (a line "<type>:", not a
// mention in a description).
bool has_media(const Operation& op, const std::string& type) {
  std::stringstream in(op.text);
  for (std::string line; std::getline(in, line);)
    if (trim(line) == type + ":") return true;
  return false;
}

std::string key(std::string_view method, std::string_view path) { return std::string(method) + " " + std::string(path); }

std::set<std::string> table_keys() {
  std::set<std::string> keys;
  for (const Route& r : ApiService::routes().routes()) keys.insert(key(r.method, r.pattern));
  return keys;
}

const std::string kDocument = NSBOX_SOURCE_DIR "/api/openapi.yaml";

// A request as the HTTP side hands it over.
nsbox::api::HttpRequest request(std::string method, std::string target, std::string authorization = "") {
  nsbox::api::HttpRequest r;
  r.method = std::move(method);
  r.target = target;
  REQUIRE(nsbox::api::parse_target(target, r));
  r.authorization = std::move(authorization);
  return r;
}

// A service on a state root of its own that nothing is made in: what it decides before a
// request's body is read needs no sandbox.
class Service {
 public:
  Service() {
    const char* libexec = std::getenv("NSBOX_LIBEXEC");
    if (libexec) saved_libexec_ = libexec;
    REQUIRE(::setenv("NSBOX_LIBEXEC", dir_.path().c_str(), 1) == 0);  // no helper is started
    auto runtime = nsbox::Runtime::open({.root = dir_.path() + "/root"});
    REQUIRE(runtime);
    service_ = std::make_unique<ApiService>(std::move(*runtime), nsbox::api::BearerToken("client-secret"),
                                            nsbox::api::LinkSigner(std::string(32, 'k')),
                                            nsbox::api::SessionStore(dir_.path() + "/sessions"), nsbox::api::ApiConfig{});
  }
  ~Service() {
    if (saved_libexec_) ::setenv("NSBOX_LIBEXEC", saved_libexec_->c_str(), 1);
    else ::unsetenv("NSBOX_LIBEXEC");
  }
  // Shard "a" of a cluster whose servers share the peer token "peer-secret-of-the-cluster".
  void shard() {
    const std::string token_file = dir_.path() + "/peer-token";
    std::ofstream(token_file) << "peer-secret-of-the-cluster\n";
    REQUIRE(::chmod(token_file.c_str(), 0600) == 0);
    auto cluster = nsbox::api::ClusterConfig::parse(
        {.shard = "a", .peers = "b=http://127.0.0.1:9", .peer_token_file = token_file, .snapshot_store = true});
    INFO((cluster ? "" : cluster.error().message));
    REQUIRE(cluster);
    service_->set_cluster(std::move(*cluster), [] {});
  }
  ApiService* operator->() { return service_.get(); }

 private:
  nsbox::test::TempDir dir_{"nsbox-route-test"};
  std::optional<std::string> saved_libexec_;
  std::unique_ptr<ApiService> service_;
};

}  // namespace

TEST_CASE("route table: api/openapi.yaml documents every route of the table, and no other") {
  std::set<std::string> documented;
  for (const auto& op : document_operations(kDocument)) {
    INFO("api/openapi.yaml:" << op.line);
    CHECK(documented.insert(key(op.method, op.path)).second);  // documented once
  }
  const std::set<std::string> served = table_keys();
  std::vector<std::string> undocumented, unserved;
  for (const auto& k : served)
    if (!documented.count(k)) undocumented.push_back(k);
  for (const auto& k : documented)
    if (!served.count(k)) unserved.push_back(k);
  INFO("in api/routes.cc's table but not in api/openapi.yaml: " << Catch::Detail::stringify(undocumented));
  INFO("in api/openapi.yaml but not in api/routes.cc's table: " << Catch::Detail::stringify(unserved));
  CHECK(undocumented.empty());
  CHECK(unserved.empty());
  CHECK(served.size() > 70);  // the sessions' twins were added
}

TEST_CASE("route table: the document gives each route the table's authority, streams and file bodies") {
  std::map<std::string, const Route*> table;
  for (const Route& r : ApiService::routes().routes()) table[key(r.method, r.pattern)] = &r;
  for (const auto& op : document_operations(kDocument)) {
    auto it = table.find(key(op.method, op.path));
    if (it == table.end()) continue;  // the test above says so
    const Route& r = *it->second;
    INFO("api/openapi.yaml:" << op.line << ": " << op.method << " " << op.path);
    CHECK(op.security == kSecurity.at(r.auth));
    const bool streams = r.answer == Answer::kStream || r.answer == Answer::kJsonOrStream;
    CHECK(has_media(op, "application/x-ndjson") == streams);
    const bool bytes = r.answer == Answer::kFile || r.body == Body::kFile;
    CHECK(has_media(op, "application/octet-stream") == bytes);
    CHECK(has_media(op, "text/plain") == (r.answer == Answer::kText));
  }
}

TEST_CASE("route table: no two routes answer the same request") {
  auto routes = ApiService::routes().routes();
  auto segments = [](const std::string& pattern) {
    std::vector<std::string> out;
    std::stringstream in(pattern);
    for (std::string s; std::getline(in, s, '/');)
      if (!s.empty()) out.push_back(s);
    return out;
  };
  for (size_t i = 0; i < routes.size(); ++i)
    for (size_t j = i + 1; j < routes.size(); ++j) {
      if (routes[i].method != routes[j].method) continue;
      auto a = segments(routes[i].pattern), b = segments(routes[j].pattern);
      bool overlap = a.size() == b.size();
      for (size_t s = 0; overlap && s < a.size(); ++s)
        overlap = a[s] == b[s] || a[s].front() == '{' || b[s].front() == '{';
      INFO(routes[i].method << " " << routes[i].pattern << " and " << routes[j].pattern);
      CHECK_FALSE(overlap);
    }
}

TEST_CASE("route table: a request's path finds its route and hands over its parameters") {
  const auto& table = ApiService::routes();
  auto m = table.match("GET", "/v1/sandboxes/etl/pty/3/output");
  REQUIRE(m.route);
  CHECK(m.route->pattern == "/v1/sandboxes/{id}/pty/{pty}/output");
  CHECK(m.params[0] == "etl");
  CHECK(m.params[1] == "3");

  // Verbs with a colon are segments of their own.
  m = table.match("POST", "/v1/sandboxes/sbx-4k2j9a/fs:mkdir");
  REQUIRE(m.route);
  CHECK(m.route->pattern == "/v1/sandboxes/{id}/fs:mkdir");
  CHECK(table.match("GET", "/v1/sandboxes/sbx-4k2j9a/fs:stat").route->pattern == "/v1/sandboxes/{id}/fs:stat");
  CHECK_FALSE(table.match("GET", "/v1/sandboxes/sbx-4k2j9a/fs:chmod").route);

  // A session's sandbox answers the sandbox's routes, on the session's id.
  m = table.match("POST", "/v1/sessions/ses-7q2m4k9x1c3d/cells");
  REQUIRE(m.route);
  CHECK(m.route->scope == nsbox::api::Scope::kSessionSandbox);
  CHECK(m.params[0] == "ses-7q2m4k9x1c3d");
  CHECK(table.match("GET", "/v1/sessions/ses-7q2m4k9x1c3d").route->scope == nsbox::api::Scope::kSession);

  // Empty segments are dropped, as they always were; a known path with another method,
  // a longer path or an unknown one is no endpoint.
  CHECK(table.match("GET", "//v1//info/").route->pattern == "/v1/info");
  CHECK_FALSE(table.match("DELETE", "/v1/info").route);
  CHECK_FALSE(table.match("GET", "/v1/sandboxes/x/cells").route);
  CHECK_FALSE(table.match("GET", "/v1/info/more").route);
  CHECK_FALSE(table.match("GET", "/").route);
  CHECK_FALSE(table.match("GET", "/a/b/c/d/e/f/g/h/i/j").route);
  CHECK_FALSE(table.match("get", "/v1/info").route);  // methods are case-sensitive (RFC 9110)
}

TEST_CASE("route table: who may call what: probes without a token, links by their signature, peers only what they relay") {
  Service service;
  service.shard();
  const std::string client = "Bearer client-secret", peer = "Bearer peer-secret-of-the-cluster";
  auto relayed = [&](std::string method, std::string target) {
    auto r = request(std::move(method), std::move(target), peer);
    r.forwarded_by = "b";
    return r;
  };

  // No token.
  for (const char* probe : {"/livez", "/readyz", "/metrics"}) CHECK(service->admits(request("GET", probe)));
  CHECK_FALSE(service->admits(request("POST", "/livez")));
  CHECK_FALSE(service->admits(request("GET", "/v1/info")));
  CHECK_FALSE(service->admits(request("GET", "/v1/nothing")));
  CHECK(service->admits(request("GET", "/v1/sandboxes/sbx-a-x/files?path=r.csv&expires=9&signature=s")));
  CHECK_FALSE(service->admits(request("GET", "/v1/sandboxes/sbx-a-x/files?path=r.csv")));
  CHECK_FALSE(service->admits(request("GET", "/v1/sessions/ses-7q2m4k9x1c3d/files?path=r.csv&expires=9&signature=s")));
  CHECK_FALSE(service->admits(request("PUT", "/v1/sandboxes/sbx-a-x/files?path=r.csv&expires=9&signature=s")));

  // The client's token: everything, a path that is no endpoint too (answered 404).
  for (const auto& [method, target] : std::vector<std::pair<const char*, const char*>>{
           {"GET", "/v1/info"}, {"POST", "/v1/drain"}, {"POST", "/v1/sandboxes"}, {"GET", "/v1/nothing"}, {"GET", "/livez"}})
    CHECK(service->admits(request(method, target, client)));
  CHECK_FALSE(service->admits(request("GET", "/v1/info", "Bearer wrong")));

  // The peer token, on a relayed request: a sandbox's and a session's routes and a
  // snapshot of a sandbox; never the server's own, nor without X-Nsbox-Forwarded-By.
  CHECK(service->admits(relayed("POST", "/v1/sandboxes/sbx-a-x/cells")));
  CHECK(service->admits(relayed("GET", "/v1/sandboxes/etl")));
  CHECK(service->admits(relayed("PUT", "/v1/sessions/ses-a-7q2m4k9x1c3d/fs?path=x")));
  CHECK(service->admits(relayed("DELETE", "/v1/sessions/ses-a-7q2m4k9x1c3d")));
  CHECK(service->admits(relayed("POST", "/v1/snapshots")));
  for (const auto& [method, target] : std::vector<std::pair<const char*, const char*>>{
           {"POST", "/v1/sandboxes"}, {"GET", "/v1/sandboxes"}, {"POST", "/v1/drain"}, {"PUT", "/v1/pool"},
           {"GET", "/v1/snapshots"}, {"DELETE", "/v1/snapshots/snp-x"}, {"POST", "/v1/sessions"}, {"GET", "/v1/info"},
           {"GET", "/v1/sandboxes/sbx-a-x/bogus"}})
    CHECK_FALSE(service->admits(relayed(method, target)));
  CHECK_FALSE(service->admits(request("POST", "/v1/sandboxes/sbx-a-x/cells", peer)));
}

TEST_CASE("route table: the bodies streamed as files are those of the routes that take a file") {
  std::set<std::string> uploads;
  for (const Route& r : ApiService::routes().routes())
    if (r.body == Body::kFile) uploads.insert(key(r.method, r.pattern));
  CHECK(uploads == std::set<std::string>{"PUT /v1/sandboxes/{id}/files", "PUT /v1/sandboxes/{id}/fs",
                                         "PUT /v1/sandboxes/{id}/fs:extract", "PUT /v1/sandboxes/{id}/workspace.tar",
                                         "PUT /v1/sessions/{sid}/workspace.tar", "PUT /v1/sessions/{sid}/files",
                                         "PUT /v1/sessions/{sid}/fs", "PUT /v1/sessions/{sid}/fs:extract"});
  Service service;
  CHECK(service->takes_upload(request("PUT", "/v1/sandboxes/etl/files?path=a.csv")));
  CHECK(service->takes_upload(request("PUT", "/v1/sessions/ses-7q2m4k9x1c3d/fs:extract?path=src")));
  CHECK_FALSE(service->takes_upload(request("PUT", "/v1/pool")));
  CHECK_FALSE(service->takes_upload(request("POST", "/v1/sandboxes/etl/files")));
  CHECK_FALSE(service->takes_upload(request("PUT", "/v1/sandboxes/etl/bogus/files")));
}

TEST_CASE("route table: the probes, the metrics and a signed link take budgets of their own, and the rest the token holders'") {
  using Kind = nsbox::api::RequestBudgets::Kind;
  Service service;
  auto intake = [&](const std::string& target, const std::string& method = "GET") { return service->intake(request(method, target)); };
  const std::string link = "/v1/sandboxes/sbx-b-1/files?path=a.bin&expires=9&signature=x";
  CHECK(intake("/livez").budget == Kind::kProbe);
  CHECK(intake("/readyz").budget == Kind::kProbe);
  CHECK(intake("//livez/").budget == Kind::kProbe);  // as it is routed
  CHECK(intake("/metrics").budget == Kind::kOpen);
  CHECK(intake("/metrics").budget_key == "/metrics");
  CHECK(intake(link).budget == Kind::kOpen);
  CHECK(intake(link).budget_key == "sbx-b-1");  // a sandbox's links share one part
  CHECK(intake(link).admitted);
  // Only a GET of a sandbox's file with a signature is a link; the rest need a token.
  CHECK(intake("/v1/sandboxes/sbx-b-1/files?path=a.bin").budget == Kind::kRequest);
  CHECK(intake(link, "PUT").budget == Kind::kRequest);
  CHECK(intake("/v1/sessions/s/files?path=a&signature=x").budget == Kind::kRequest);
  CHECK(intake("/livez", "POST").budget == Kind::kRequest);
  CHECK(intake("/v1/info").budget == Kind::kRequest);
}
