#include "runtime/core/sandbox_record.h"

#include <limits>

namespace nsbox {
namespace {

using protocol::Json;

Error corrupt(const std::string& what) { return make_error(ErrorCode::kInternal, "corrupt sandbox record: " + what); }

// A pid of a record: absent is 0; anything but an integer in [0, pid_t max] makes the
// record corrupt (a float or a huge number must not reach a conversion to int).
Result<pid_t> pid_value(const Json& j) {
  if (j.is_number_integer() && j.get<int64_t>() >= 0 && j.get<int64_t>() <= std::numeric_limits<pid_t>::max())
    return static_cast<pid_t>(j.get<int64_t>());
  return fail(corrupt(j.dump().substr(0, 40) + " is not a pid"));
}

Result<pid_t> pid_field(const Json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() ? Result<pid_t>(0) : pid_value(*it);
}

}  // namespace

std::string_view enforcement_name(Enforcement e) {
  switch (e) {
    case Enforcement::kCgroupV1: return "cgroup_v1";
    case Enforcement::kCgroupV2: return "cgroup_v2";
    case Enforcement::kRlimits: return "rlimits";
  }
  return "rlimits";
}

Json SandboxRecord::to_json() const {
  Json j = spec.to_json();
  const SandboxFacts& f = facts;
  j["id"] = id;
  j["created_at"] = f.created_at;
  j["stopped_at"] = f.stopped_at;
  if (!f.expires_at.empty()) j["expires_at"] = f.expires_at;
  j["home"] = f.home;
  j["supervisor_pid"] = f.supervisor_pid;
  j["init_pid"] = f.init_pid;
  j["enforcement"] = enforcement_name(f.enforcement);
  j["cgroup"] = {{"driver", f.cgroup.driver}, {"dirs", f.cgroup.dirs}, {"controllers", f.cgroup.controllers}};
  j["signed_mounts"] = f.signed_mounts;
  j["mount_servers"] = f.mount_servers;
  j["pool"] = f.pool;
  j["create_path"] = f.create_path;
  j["ports"] = Json::array();
  for (const auto& p : f.ports) j["ports"].push_back(p.to_json());
  return j;
}

Result<SandboxRecord> SandboxRecord::from_json(const Json& j) {
  SandboxRecord r;
  r.spec = NSBOX_TRY(SandboxSpec::from_json(j));
  try {
    SandboxFacts& f = r.facts;
    r.id = j.at("id").get<std::string>();
    f.created_at = j.value("created_at", "");
    f.stopped_at = j.value("stopped_at", "");
    f.expires_at = j.value("expires_at", "");
    f.home = j.value("home", "");
    f.supervisor_pid = NSBOX_TRY(pid_field(j, "supervisor_pid"));
    f.init_pid = NSBOX_TRY(pid_field(j, "init_pid"));
    std::string e = j.value("enforcement", "rlimits");
    f.enforcement = e == "cgroup_v1" ? Enforcement::kCgroupV1 : e == "cgroup_v2" ? Enforcement::kCgroupV2 : Enforcement::kRlimits;
    if (auto c = j.find("cgroup"); c != j.end()) {
      f.cgroup.driver = c->value("driver", "");
      f.cgroup.dirs = c->value("dirs", std::vector<std::string>{});
      f.cgroup.controllers = c->value("controllers", std::vector<std::string>{});
    }
    f.signed_mounts = j.value("signed_mounts", std::vector<std::string>{});
    for (const auto& pid : j.value("mount_servers", Json::array())) f.mount_servers.push_back(NSBOX_TRY(pid_value(pid)));
    f.pool = j.value("pool", "");
    f.create_path = j.value("create_path", "cold");
    for (const auto& p : j.value("ports", Json::array())) f.ports.push_back(ExposedPort::from_json(p));
  } catch (const Json::exception& e) {
    return fail(corrupt(e.what()));
  }
  return r;
}

Error free_member_error(const std::string& id, const std::string& owner) {
  return make_error(ErrorCode::kPermissionDenied, "sandbox " + id + " is a free member of a warm pool (" + owner + ")",
                    "a create through that server claims one");
}

}  // namespace nsbox
