// The durable description of one sandbox: its spec (what was asked, runtime/core/
// sandbox_spec.h) and the facts learned when it was made and while it runs. Holds no
// secret: env values and credentials stay in the supervisor's memory (LaunchEnvelope).
//
// Its JSON is flat, the spec's fields beside the facts' (`inspect --json`, the API's
// sandbox documents and state.json all read the same).
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "isolation/cgroup.h"
#include "runtime/core/sandbox_spec.h"

namespace nsbox {

// How the limits of a sandbox are enforced.
enum class Enforcement { kCgroupV1, kCgroupV2, kRlimits };
std::string_view enforcement_name(Enforcement e);

// A port of the sandbox forwarded from the host's loopback (runtime/supervisor/port_forwards.h).
struct ExposedPort {
  uint16_t port = 0;       // inside the sandbox (its 127.0.0.1)
  std::string host;        // where the host's side listens: 127.0.0.1 unless asked
  uint16_t host_port = 0;
  nlohmann::json to_json() const { return {{"port", port}, {"host", host}, {"host_port", host_port}}; }
  // Throws nlohmann's exceptions for a field missing or of the wrong type.
  static ExposedPort from_json(const nlohmann::json& j) {
    return {j.at("port").get<uint16_t>(), j.at("host").get<std::string>(), j.at("host_port").get<uint16_t>()};
  }
};

struct SandboxFacts {
  std::string created_at;  // RFC 3339, UTC
  std::string stopped_at;  // RFC 3339, when `nsbox stop` stopped it; empty while it runs
  std::string expires_at;  // RFC 3339, when its time to live runs out; empty: none runs (a stopped sandbox's)
  std::string home;  // its home volume's name (/home/user); empty: made before homes were kept
  pid_t supervisor_pid = 0;
  pid_t init_pid = 0;
  Enforcement enforcement = Enforcement::kRlimits;
  cgroup::Placement cgroup;
  // The mount paths of those made with credentials (anonymous ones have none): a start
  // without them again is refused rather than mounting anonymously.
  std::vector<std::string> signed_mounts;
  std::vector<pid_t> mount_servers;  // a FUSE server's pid per mount
  // The warm pool (docs/semantics.md, "Warm pool"): a member waiting to be claimed names
  // the server that made it ("nsbox-server:<pid>"); empty once claimed, or never pooled.
  std::string pool;
  std::string create_path = "cold";  // "warm": claimed from a pool; "cold": built for its create
  std::vector<ExposedPort> ports;     // forwarded while it runs; none once it stopped
};

struct SandboxRecord {
  std::string id;
  SandboxSpec spec;
  SandboxFacts facts;

  nlohmann::json to_json() const;
  static Result<SandboxRecord> from_json(const nlohmann::json& j);
};

// A warm pool's free member is its server's (`owner`) until a create claims it: nothing
// is put in it or taken from it before. The one refusal of the supervisor, the runtime
// and the API.
Error free_member_error(const std::string& id, const std::string& owner);
inline Result<void> require_not_free_member(const SandboxRecord& record) {
  if (record.facts.pool.empty()) return {};
  return fail(free_member_error(record.id, record.facts.pool));
}

}  // namespace nsbox
