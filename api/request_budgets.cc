#include "api/request_budgets.h"


namespace nsbox::api {

RequestBudgets::RequestBudgets(Limits limits) : limits_(limits), counts_(std::make_shared<Counts>()) {}

Result<RequestBudgets::Ticket> RequestBudgets::take(Kind kind, const std::string& key) {
  const size_t k = static_cast<size_t>(kind);
  const size_t limit = kind == Kind::kProbe ? limits_.probes : kind == Kind::kOpen ? limits_.open : limits_.requests;
  {
    std::lock_guard lock(counts_->m);
    if (counts_->used[k] >= limit) {
      const char* what = kind == Kind::kProbe   ? " probes in work"
                         : kind == Kind::kOpen ? " requests without a token in work (download links, metrics)"
                                                : " requests in work";
      return fail(make_error(ErrorCode::kUnavailable, "the server has " + std::to_string(limit) + what, "try again"));
    }
    if (!key.empty() && counts_->per_key[key] >= limits_.open_per_key) {
      return fail(make_error(ErrorCode::kUnavailable,
                             (key == "/metrics" ? std::string("/metrics has ") : "the download links of sandbox " + key + " have ") +
                                 std::to_string(limits_.open_per_key) + " requests in work",
                             "try again"));
    }
    ++counts_->used[k];
    if (!key.empty()) ++counts_->per_key[key];
  }
  // The slot itself holds nothing: its deleter gives the counts back.
  std::shared_ptr<void> slot(nullptr, [counts = counts_, k, key](void*) {
    std::lock_guard lock(counts->m);
    --counts->used[k];
    if (key.empty()) return;
    auto it = counts->per_key.find(key);
    if (it != counts->per_key.end() && --it->second == 0) counts->per_key.erase(it);
  });
  return Ticket{std::move(slot), kind, kind == Kind::kOpen};
}

size_t RequestBudgets::in_use(Kind kind) const {
  std::lock_guard lock(counts_->m);
  return counts_->used[static_cast<size_t>(kind)];
}

}  // namespace nsbox::api
