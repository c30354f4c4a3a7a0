#include "runtime/protocol/supervisor_spec.h"

namespace nsbox {

using protocol::Json;

Json SupervisorSpec::to_json() const {
  Json env_obj = Json::array();
  for (const auto& [k, v] : env) env_obj.push_back({k, v});
  Json mounts_arr = Json::array();
  for (const auto& m : mounts) mounts_arr.push_back({{"mount", m.mount.to_json()}, {"credentials", m.credentials.to_json()}});
  return {{"id", id},         {"name", name}, {"size", size_tier_name(size)}, {"net", net.to_json()},
          {"net_resolve", net_resolve}, {"nat_netns", nat_netns}, {"packages", packages.to_json()}, {"env", env_obj},   {"volume", volume}, {"home", home}, {"created_at", created_at}, {"ephemeral", ephemeral}, {"manifest_digest", manifest_digest}, {"pool", pool}, {"create_path", create_path}, {"preload", preload}, {"memory_merge", memory_merge}, {"lazy_kernel", lazy_kernel}, {"kernel_zygote", kernel_zygote}, {"mounts", mounts_arr}, {"tools", tools.to_json()},
          {"tool_keys", tool_keys.to_json()}};
}

Result<SupervisorSpec> SupervisorSpec::from_json(const Json& j) {
  try {
    SupervisorSpec s;
    s.id = j.at("id").get<std::string>();
    s.name = j.value("name", "");
    s.size = NSBOX_TRY(parse_size_tier(j.at("size").get<std::string>()));
    s.net = NSBOX_TRY(net::NetPolicy::from_json(j.at("net")));
    s.net_resolve = j.value("net_resolve", std::map<std::string, std::string>{});
    s.nat_netns = j.value("nat_netns", "");
    if (j.contains("packages")) s.packages = NSBOX_TRY(PackageSources::from_json(j["packages"]));
    for (const auto& kv : j.value("env", Json::array())) s.env.emplace_back(kv.at(0).get<std::string>(), kv.at(1).get<std::string>());
    s.volume = j.at("volume").get<std::string>();
    s.home = j.value("home", "");
    s.created_at = j.value("created_at", "");
    s.ephemeral = j.value("ephemeral", std::vector<std::string>{});
    s.manifest_digest = j.value("manifest_digest", "");
    s.pool = j.value("pool", "");
    s.create_path = j.value("create_path", "cold");
    s.preload = j.value("preload", std::vector<std::string>{});
    s.memory_merge = j.value("memory_merge", false);
    s.lazy_kernel = j.value("lazy_kernel", false);
    s.kernel_zygote = j.value("kernel_zygote", "");
    for (const auto& m : j.value("mounts", Json::array()))
      s.mounts.push_back({NSBOX_TRY(bucket::BucketMount::from_json(m.at("mount"))),
                          bucket::BucketCredentials::from_json(m.value("credentials", Json::object()))});
    if (j.contains("tools")) s.tools = NSBOX_TRY(ToolsConfig::from_json(j["tools"]));
    s.tool_keys = ToolKeys::from_json(j.value("tool_keys", Json()));
    return s;
  } catch (const Json::exception& e) {
    return fail(make_error(ErrorCode::kProtocol, std::string("malformed supervisor spec: ") + e.what()));
  }
}

int mounts_start_bound_ms(const std::vector<bucket::MountRequest>& mounts) {
  int total = 0;
  for (const auto& r : mounts)
    total += r.mount.strategy == bucket::MountStrategy::kBuiltin ? kBucketServerReadyMs  // check and mount
                                                                 : kBucketServerReadyMs + kHelperMountTimeoutMs;  // check, then the tool
  return total;
}

}  // namespace nsbox
