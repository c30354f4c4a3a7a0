#include "api/request_budgets.h"

#include "api/request_target.h"

namespace nsbox::api {

RequestBudgets::RequestBudgets(Limits limits) : limits_(limits), counts_(std::make_shared<Counts>()) {}

RequestBudgets::Kind RequestBudgets::kind_of(const HttpRequest& r, std::string* key) {
  if (r.method != "GET") return Kind::kRequest;
  // Split as ApiService routes them ("//livez" is /livez).
  const auto path = split_path(r.path);
  if (path.size() == 1 && (path[0] == "livez" || path[0] == "readyz")) return Kind::kProbe;
  if (path.size() == 1 && path[0] == "metrics") {
    if (key) *key = "/metrics";
    return Kind::kOpen;
  }
  // A download link (runtime/links/download_link.h): its signature is its only authority
  // (ApiService::authorized), so anyone holding one may open it, as often as they like.
  if (r.query.count("signature") && path.size() == 4 && path[0] == "v1" && path[1] == "sandboxes" && path[3] == "files") {
    if (key) *key = path[2];  // the sandbox (an id never starts with '/')
    return Kind::kOpen;
  }
  return Kind::kRequest;
}

Result<RequestBudgets::Ticket> RequestBudgets::take(const HttpRequest& r) {
  std::string key;
  const Kind kind = kind_of(r, &key);
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
