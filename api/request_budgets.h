// How many requests the HTTP server answers at once, by kind (docs/design.md, "Server"),
// so that no kind can take what another needs: a flood of download links that nobody
// reads must not stop the probes a Kubernetes kubelet restarts the pod on, nor the
// token holders' requests.
//
//   probes    GET /livez, /readyz               16, never behind any other request
//   open      admitted without a token: a       64, at most 16 per sandbox (a sandbox
//             download link, GET /metrics       mints any number of links to its files)
//                                               and 16 for /metrics; held until the
//                                               answer is written, not only while a
//                                               worker prepares it
//   requests  the rest (a token's)              256, while their worker runs
//
// A request past its budget is refused at once (503 unavailable, Retry-After), before
// its body is read. Thread-safe: slots are taken on the I/O thread and given back by
// whichever side lets go last (the worker, or the connection once the answer is out).
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "isolation/sys/error.h"

namespace nsbox::api {

class RequestBudgets {
 public:
  struct Limits {
    size_t probes = 16;
    size_t open = 64;
    size_t open_per_key = 16;
    size_t requests = 256;
  };
  enum class Kind { kProbe, kOpen, kRequest };

  // A taken slot: given back when the last copy of `slot` goes. `until_written`: the
  // connection keeps a copy until the answer is written (the open kind), else only the
  // worker holds it.
  struct Ticket {
    std::shared_ptr<void> slot;
    Kind kind = Kind::kRequest;
    bool until_written = false;
  };

  RequestBudgets() : RequestBudgets(Limits{}) {}
  explicit RequestBudgets(Limits limits);
  RequestBudgets(const RequestBudgets&) = delete;
  RequestBudgets& operator=(const RequestBudgets&) = delete;

  // A slot of `kind` (the route table says which: ApiService::intake), or kUnavailable
  // naming the budget that is full. `key`: for the open kind, the share it counts under (a
  // link's sandbox, or a route such as "/metrics").
  Result<Ticket> take(Kind kind, const std::string& key = "");

  size_t in_use(Kind kind) const;
  const Limits& limits() const { return limits_; }

 private:
  struct Counts {
    std::mutex m;
    size_t used[3] = {0, 0, 0};
    std::map<std::string, size_t> per_key;
  };
  Limits limits_;
  // Shared with the tickets, which may outlive the budgets (a worker still running when
  // the server is gone).
  std::shared_ptr<Counts> counts_;
};

}  // namespace nsbox::api
