// The sharded serve's pieces that need no server: shard names and the ids that carry
// them, `nsbox serve`'s cluster flags, and the metrics' text format (api/cluster.h,
// api/metrics.h, runtime/core/state_store.h).
#include <catch2/catch.hpp>
#include <sys/stat.h>

#include <fstream>
#include <regex>

#include "api/cluster.h"
#include "api/metrics.h"
#include "api/sessions.h"
#include "isolation/sys/files.h"
#include "runtime/core/state_store.h"

namespace {

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/nsbox-test-cluster-XXXXXX";
    REQUIRE(::mkdtemp(tmpl));
    dir = tmpl;
  }
  ~TempDir() { (void)nsbox::files::remove_tree(dir); }
  const std::string& path() const { return dir; }
  std::string dir;
};

}  // namespace

using nsbox::api::ClusterConfig;
using nsbox::api::ClusterFlags;

TEST_CASE("shards: names are [a-z0-9]{1,16}, and an id names its shard", "[cluster]") {
  for (const char* ok : {"a", "0", "shard7", "abcdefghij012345"}) CHECK(nsbox::validate_shard(ok));
  for (const char* bad : {"", "A", "a-b", "a_b", "abcdefghij0123456", "a.b", "a/b", "é"}) CHECK(!nsbox::validate_shard(bad));
  CHECK(nsbox::shard_of_id("sbx-a-x1y2z3") == "a");
  CHECK(nsbox::shard_of_id("sbx-17-x1y2z3") == "17");
  CHECK(nsbox::shard_of_id("sbx-x1y2z3").empty());  // made without a shard
  CHECK(nsbox::shard_of_id("my-sandbox").empty());  // a name
  CHECK(nsbox::shard_of_id("sbx-A-x1y2z3").empty());
  CHECK(nsbox::shard_of_id("sbx--x1y2z3").empty());
  nsbox::StateStore sharded({"/nonexistent/run", "/nonexistent/data"}, "b7");
  for (int i = 0; i < 20; ++i) {
    std::string id = sharded.new_id();
    CHECK(std::regex_match(id, std::regex("sbx-b7-[0-9a-z]{6}")));
    CHECK(nsbox::shard_of_id(id) == "b7");
  }
  CHECK(std::regex_match(nsbox::StateStore({"/r", "/d"}).new_id(), std::regex("sbx-[0-9a-z]{6}")));
  // Sessions carry the shard too (they live where they were made).
  CHECK(nsbox::api::shard_of_session("ses-b7-0123456789ab") == "b7");
  CHECK(nsbox::api::shard_of_session("ses-0123456789ab").empty());
  CHECK(nsbox::api::shard_of_session("ses-B7-0123456789ab").empty());
  CHECK(nsbox::api::shard_of_session("ses--0123456789ab").empty());
  CHECK(nsbox::api::shard_of_session("ses-b7-0123456789a").empty());
  TempDir dir;
  nsbox::api::SessionStore sharded_sessions(dir.path(), "b7");
  auto made = sharded_sessions.create(nlohmann::json::object());
  REQUIRE(made);
  CHECK(std::regex_match(made->id, std::regex("ses-b7-[0-9a-z]{12}")));
  CHECK(sharded_sessions.load(made->id));
}

TEST_CASE("cluster flags: a shard needs a snapshot store, peers need a token file, templates and lists both work", "[cluster]") {
  TempDir dir;
  std::string token = dir.path() + "/peer-token";
  ClusterFlags f;
  CHECK(ClusterConfig::parse(f));  // no flag: one server alone
  CHECK(!ClusterConfig::parse(f)->sharded());

  f.shard = "a";
  auto no_store = ClusterConfig::parse(f);
  REQUIRE(!no_store);
  CHECK(no_store.error().message.find("--snapshot-store") != std::string::npos);
  f.snapshot_store = true;
  REQUIRE(ClusterConfig::parse(f));

  f.peers = "a=http://127.0.0.1:1,b=http://127.0.0.1:2";
  auto no_token = ClusterConfig::parse(f);
  REQUIRE(!no_token);
  CHECK(no_token.error().message.find("--peer-token-file") != std::string::npos);
  f.peer_token_file = token;
  auto missing = ClusterConfig::parse(f);  // never made: every server needs the same one
  REQUIRE(!missing);
  CHECK(missing.error().message.find("does not exist") != std::string::npos);
  REQUIRE(nsbox::files::atomic_write(token, "0123456789abcdef0123456789abcdef\n", 0644));
  auto readable = ClusterConfig::parse(f);  // readable by others: refused
  REQUIRE(!readable);
  REQUIRE(::chmod(token.c_str(), 0600) == 0);
  auto listed = ClusterConfig::parse(f);
  REQUIRE(listed);
  CHECK(listed->peer_token() == "0123456789abcdef0123456789abcdef");
  CHECK(listed->peer_url("b") == std::optional<std::string>("http://127.0.0.1:2"));
  CHECK(!listed->peer_url("a"));  // ours
  CHECK(!listed->peer_url("c"));  // unknown
  CHECK(listed->listed_peers() == std::vector<std::string>{"b"});

  f.peers = "http://nsbox-{shard}.nsbox-peers.ns.svc:8080";
  auto templated = ClusterConfig::parse(f);
  REQUIRE(templated);
  CHECK(templated->peer_url("3") == std::optional<std::string>("http://nsbox-3.nsbox-peers.ns.svc:8080"));
  CHECK(!templated->peer_url("BAD"));
  CHECK(templated->listed_peers().empty());
}

TEST_CASE("cluster flags: bad values are refused with the flag named", "[cluster]") {
  TempDir dir;
  auto refused = [&](ClusterFlags f, const std::string& flag) {
    f.snapshot_store = true;
    if (!f.shard) f.shard = "a";
    auto c = ClusterConfig::parse(f);
    INFO(flag);
    REQUIRE(!c);
    CHECK(c.error().message.find(flag) != std::string::npos);
  };
  REQUIRE(nsbox::files::atomic_write(dir.path() + "/t", "0123456789abcdef0123456789abcdef\n", 0600));
  refused({.shard = "Bad"}, "--shard");
  refused({.peers = "b=ftp://x:1", .peer_token_file = dir.path() + "/t"}, "--peers");
  refused({.peers = "b=http://x:1/path", .peer_token_file = dir.path() + "/t"}, "--peers");
  refused({.peers = "http://x:1", .peer_token_file = dir.path() + "/t"}, "--peers");
  refused({.peers = "B=http://x:1", .peer_token_file = dir.path() + "/t"}, "--peers");
  refused({.capacity = "0"}, "--capacity");
  refused({.capacity = "ten"}, "--capacity");
  refused({.drain_grace = "-1"}, "--drain-grace");
  refused({.drain_grace = "nan"}, "--drain-grace");
  ClusterFlags peers_alone{.peers = "b=http://x:1"};
  auto alone = ClusterConfig::parse(peers_alone);
  REQUIRE(!alone);
  CHECK(alone.error().message.find("--shard") != std::string::npos);
  std::string short_token = dir.path() + "/short";
  REQUIRE(nsbox::files::atomic_write(short_token, "abc\n", 0600));
  refused({.peers = "b=http://x:1", .peer_token_file = short_token}, "--peer-token-file");
}

TEST_CASE("metrics: Prometheus text with HELP and TYPE once per family, cumulative histogram buckets", "[cluster]") {
  nsbox::api::Metrics m;
  m.observe_create(true, 0.003);
  m.observe_create(false, 0.04);
  m.observe_create(false, 20);
  m.count_forward(true);
  nsbox::api::MetricsState s;
  s.sandboxes["running"]["standard"] = 3;
  s.warm_ready["standard"] = 2;
  s.active = 3;
  s.capacity = 5;
  s.free_slots = 2;
  s.ready = true;
  std::string text = m.render(s);
  CHECK(text.find("nsbox_warm_ready{size=\"standard\"} 2\n") != std::string::npos);
  CHECK(text.find("nsbox_free_slots 2\n") != std::string::npos);
  CHECK(text.find("nsbox_sandboxes{status=\"running\",size=\"standard\"} 3\n") != std::string::npos);
  CHECK(text.find("nsbox_create_seconds_bucket{path=\"warm\",le=\"0.005\"} 1\n") != std::string::npos);
  CHECK(text.find("nsbox_create_seconds_bucket{path=\"warm\",le=\"0.002\"} 0\n") != std::string::npos);
  CHECK(text.find("nsbox_create_seconds_bucket{path=\"cold\",le=\"0.05\"} 1\n") != std::string::npos);
  CHECK(text.find("nsbox_create_seconds_bucket{path=\"cold\",le=\"+Inf\"} 2\n") != std::string::npos);
  CHECK(text.find("nsbox_create_seconds_count{path=\"cold\"} 2\n") != std::string::npos);
  CHECK(text.find("nsbox_forwarded_requests_total 1\n") != std::string::npos);
  // Every line is a comment or `name{labels} value`; every family's TYPE comes once, before its samples.
  std::regex sample(R"(^[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? (\+Inf|[0-9.e+-]+)$)");
  std::map<std::string, int> types;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    INFO(line);
    if (line.starts_with("# TYPE ")) {
      CHECK(++types[line.substr(7, line.find(' ', 7) - 7)] == 1);
      continue;
    }
    if (line.starts_with("# HELP ")) continue;
    CHECK(std::regex_match(line, sample));
  }
  CHECK(types.count("nsbox_create_seconds"));
  nsbox::api::MetricsState unlimited;
  CHECK(m.render(unlimited).find("nsbox_free_slots +Inf\n") != std::string::npos);
}
