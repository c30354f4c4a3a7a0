// The HTTP server's budgets of requests in work (api/request_budgets.h): no kind of
// request can take the slots another needs, a sandbox's download links take at most
// their own share, and a slot comes back only when its last holder lets go.
#include "api/request_budgets.h"

#include <catch2/catch.hpp>
#include <vector>

using nsbox::api::RequestBudgets;
using Kind = RequestBudgets::Kind;

namespace {

// What a request takes (ApiService::intake says which; tests/unit/route_table_test.cc
// checks it says so for each route).
struct Asks {
  Kind kind;
  std::string key;
};
const Asks kInfo{Kind::kRequest, ""}, kLivez{Kind::kProbe, ""}, kMetrics{Kind::kOpen, "/metrics"};
Asks link(const std::string& sandbox) { return {Kind::kOpen, sandbox}; }

// Takes slots for `a` until one is refused; returns those taken.
std::vector<RequestBudgets::Ticket> fill(RequestBudgets& budgets, const Asks& a) {
  std::vector<RequestBudgets::Ticket> taken;
  for (;;) {
    auto t = budgets.take(a.kind, a.key);
    if (!t) {
      CHECK(t.error().code == nsbox::ErrorCode::kUnavailable);
      return taken;
    }
    taken.push_back(std::move(*t));
  }
}

}  // namespace

TEST_CASE("request budgets: probes are admitted while every other slot is taken") {
  RequestBudgets budgets;
  auto requests = fill(budgets, kInfo);
  CHECK(requests.size() == budgets.limits().requests);
  std::vector<RequestBudgets::Ticket> links;
  for (int s = 0; links.size() < budgets.limits().open; ++s) {
    auto more = fill(budgets, link("sbx-a-" + std::to_string(s)));
    REQUIRE(!more.empty());
    for (auto& t : more) links.push_back(std::move(t));
  }
  CHECK(!budgets.take(kMetrics.kind, kMetrics.key));
  auto probe = budgets.take(Kind::kProbe);
  REQUIRE(probe);
  CHECK_FALSE(probe->until_written);
  CHECK(budgets.take(Kind::kProbe));
}

TEST_CASE("request budgets: one sandbox's links take at most their share, and another's and /metrics still get theirs") {
  RequestBudgets budgets;
  auto first = fill(budgets, link("sbx-b-1"));
  CHECK(first.size() == budgets.limits().open_per_key);
  CHECK(first.front().until_written);  // held until the answer is out, not only while a worker runs
  auto refused = budgets.take(Kind::kOpen, "sbx-b-1");
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message.find("sbx-b-1") != std::string::npos);
  CHECK(budgets.take(Kind::kOpen, "sbx-b-2"));
  CHECK(budgets.take(kMetrics.kind, kMetrics.key));
  CHECK(budgets.take(Kind::kRequest));
}

TEST_CASE("request budgets: a slot comes back when its last holder lets go") {
  RequestBudgets budgets;
  auto taken = fill(budgets, link("sbx-b-1"));
  REQUIRE(!taken.empty());
  std::shared_ptr<void> connection_copy = taken.back().slot;  // the connection still writes the answer
  taken.pop_back();                                           // the worker is done
  CHECK_FALSE(budgets.take(Kind::kOpen, "sbx-b-1"));
  connection_copy.reset();
  auto again = budgets.take(Kind::kOpen, "sbx-b-1");
  CHECK(again);
  const size_t before = budgets.in_use(Kind::kOpen);
  taken.clear();
  CHECK(budgets.in_use(Kind::kOpen) == before - budgets.limits().open_per_key + 1);
}
