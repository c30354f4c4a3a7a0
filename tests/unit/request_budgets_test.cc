// The HTTP server's budgets of requests in work (api/request_budgets.h): no kind of
// request can take the slots another needs, a sandbox's download links take at most
// their own share, and a slot comes back only when its last holder lets go.
#include "api/request_budgets.h"

#include <catch2/catch.hpp>
#include <vector>

#include "api/request_target.h"

using nsbox::api::HttpRequest;
using nsbox::api::RequestBudgets;
using Kind = RequestBudgets::Kind;

namespace {

HttpRequest get(const std::string& target, const std::string& method = "GET") {
  HttpRequest r;
  r.method = method;
  r.target = target;
  REQUIRE(nsbox::api::parse_target(target, r));
  return r;
}

std::string link(const std::string& sandbox) { return "/v1/sandboxes/" + sandbox + "/files?path=a.bin&expires=9&signature=x"; }

// Takes slots for `r` until one is refused; returns those taken.
std::vector<RequestBudgets::Ticket> fill(RequestBudgets& budgets, const HttpRequest& r) {
  std::vector<RequestBudgets::Ticket> taken;
  for (;;) {
    auto t = budgets.take(r);
    if (!t) {
      CHECK(t.error().code == nsbox::ErrorCode::kUnavailable);
      return taken;
    }
    taken.push_back(std::move(*t));
  }
}

}  // namespace

TEST_CASE("request budgets: probes, requests without a token and the rest are told apart") {
  CHECK(RequestBudgets::kind_of(get("/livez")) == Kind::kProbe);
  CHECK(RequestBudgets::kind_of(get("/readyz")) == Kind::kProbe);
  CHECK(RequestBudgets::kind_of(get("//livez/")) == Kind::kProbe);  // as ApiService routes it
  std::string key;
  CHECK(RequestBudgets::kind_of(get("/metrics"), &key) == Kind::kOpen);
  CHECK(key == "/metrics");
  CHECK(RequestBudgets::kind_of(get(link("sbx-b-1")), &key) == Kind::kOpen);
  CHECK(key == "sbx-b-1");
  // Only a GET of a sandbox's file with a signature is a link; the rest need a token.
  CHECK(RequestBudgets::kind_of(get("/v1/sandboxes/sbx-b-1/files?path=a.bin")) == Kind::kRequest);
  CHECK(RequestBudgets::kind_of(get(link("sbx-b-1"), "PUT")) == Kind::kRequest);
  CHECK(RequestBudgets::kind_of(get("/v1/sessions/s/files?path=a&signature=x")) == Kind::kRequest);
  CHECK(RequestBudgets::kind_of(get("/livez", "POST")) == Kind::kRequest);
  CHECK(RequestBudgets::kind_of(get("/v1/info")) == Kind::kRequest);
}

TEST_CASE("request budgets: probes are admitted while every other slot is taken") {
  RequestBudgets budgets;
  auto requests = fill(budgets, get("/v1/info"));
  CHECK(requests.size() == budgets.limits().requests);
  std::vector<RequestBudgets::Ticket> links;
  for (int s = 0; links.size() < budgets.limits().open; ++s) {
    auto more = fill(budgets, get(link("sbx-a-" + std::to_string(s))));
    REQUIRE(!more.empty());
    for (auto& t : more) links.push_back(std::move(t));
  }
  CHECK(!budgets.take(get("/metrics")));
  auto probe = budgets.take(get("/livez"));
  REQUIRE(probe);
  CHECK_FALSE(probe->until_written);
  CHECK(budgets.take(get("/readyz")));
}

TEST_CASE("request budgets: one sandbox's links take at most their share; another's and /metrics still get theirs") {
  RequestBudgets budgets;
  auto first = fill(budgets, get(link("sbx-b-1")));
  CHECK(first.size() == budgets.limits().open_per_key);
  CHECK(first.front().until_written);  // held until the answer is out, not only while a worker runs
  auto refused = budgets.take(get(link("sbx-b-1")));
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message.find("sbx-b-1") != std::string::npos);
  CHECK(budgets.take(get(link("sbx-b-2"))));
  CHECK(budgets.take(get("/metrics")));
  CHECK(budgets.take(get("/v1/info")));
}

TEST_CASE("request budgets: a slot comes back when its last holder lets go") {
  RequestBudgets budgets;
  auto taken = fill(budgets, get(link("sbx-b-1")));
  REQUIRE(!taken.empty());
  std::shared_ptr<void> connection_copy = taken.back().slot;  // the connection still writes the answer
  taken.pop_back();                                           // the worker is done
  CHECK_FALSE(budgets.take(get(link("sbx-b-1"))));
  connection_copy.reset();
  auto again = budgets.take(get(link("sbx-b-1")));
  CHECK(again);
  const size_t before = budgets.in_use(Kind::kOpen);
  taken.clear();
  CHECK(budgets.in_use(Kind::kOpen) == before - budgets.limits().open_per_key + 1);
}
