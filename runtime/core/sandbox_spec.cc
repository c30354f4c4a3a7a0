#include "runtime/core/sandbox_spec.h"

#include "isolation/rootfs.h"
#include "mounts/volume_image.h"

namespace nsbox {
namespace {

using protocol::Json;

// One plain field read from a document: `request` says whose (a create document's
// errors are the caller's, a record's are corruption).
struct FieldReader {
  const Json& doc;
  bool request;

  Error wrong(const char* key, const char* what) const {
    std::string message = "\"" + std::string(key) + "\" must be " + what;
    return request ? make_error(ErrorCode::kMalformedRequest, message)
                   : make_error(ErrorCode::kInternal, "corrupt sandbox record: " + message);
  }
  Result<void> read(const Json& v, const char* key, std::string& out) const {
    if (!v.is_string()) return fail(wrong(key, "a string"));
    out = v.get<std::string>();
    return {};
  }
  Result<void> read(const Json& v, const char* key, bool& out) const {
    if (!v.is_boolean()) return fail(wrong(key, "true or false"));
    out = v.get<bool>();
    return {};
  }
  Result<void> read(const Json& v, const char* key, std::vector<std::string>& out) const {
    if (!v.is_array()) return fail(wrong(key, "a list of strings"));
    out.clear();
    for (const auto& item : v) {
      if (!item.is_string()) return fail(wrong(key, "a list of strings"));
      out.push_back(item.get<std::string>());
    }
    return {};
  }
  Result<void> read(const Json& v, const char* key, uint64_t& out, ByteCount) const {
    // A request's size is checked as text is, number or not (parse_size has the bounds).
    if (request && (v.is_string() || v.is_number_unsigned())) {
      out = NSBOX_TRY(volume_image::parse_size(v.is_string() ? v.get<std::string>() : std::to_string(v.get<uint64_t>())));
      return {};
    }
    if (!request && v.is_number_unsigned()) {
      out = v.get<uint64_t>();
      return {};
    }
    return fail(wrong(key, request ? "bytes or a size such as \"10G\"" : "a number of bytes"));
  }

  Result<void> read(const Json& v, const char* key, uint64_t& out, Seconds) const {
    if (!v.is_number_unsigned() || v.get<uint64_t>() > Seconds::kMax)
      return fail(wrong(key, ("whole seconds, at most " + std::to_string(Seconds::kMax)).c_str()));
    out = v.get<uint64_t>();
    return {};
  }

  Result<void> read(const Json& v, const char* key, std::string& out, WorkspaceRoot) const {
    NSBOX_CHECK(read(v, key, out));
    if (auto ok = rootfs::check_workspace_root(out); !ok)
      return fail(request ? ok.error() : make_error(ErrorCode::kInternal, "corrupt sandbox record: " + ok.error().message));
    return {};
  }

  // Every field of the table `only` admits; the first error stops.
  template <class Admit>
  Result<void> read_all(SandboxSpec& spec, Admit only) const {
    Result<void> status;
    spec_fields(spec, [&](const char* key, auto& field, SpecFieldOrigin origin, auto... tag) {
      if (!status || !only(origin)) return;
      auto it = doc.find(key);
      if (it != doc.end()) status = read(*it, key, field, tag...);
    });
    return status;
  }
};

}  // namespace

Json SandboxSpec::to_json() const {
  Json j = Json::object();
  spec_fields(*this, [&](const char* key, const auto& field, SpecFieldOrigin, auto...) { j[key] = field; });
  j["size"] = size_tier_name(size);
  j["net"] = net.to_json();
  j["packages"] = packages.any_source() || !packages.auto_install ? packages.to_json() : Json(nullptr);
  Json mounts_json = Json::array();
  for (const auto& m : mounts) mounts_json.push_back(m.to_json());
  j["mounts"] = std::move(mounts_json);
  j["tools"] = tools.enabled() ? tools.to_json() : Json(nullptr);
  Json accounts_json = accounts.to_json();
  j["users"] = std::move(accounts_json["users"]);
  j["groups"] = std::move(accounts_json["groups"]);
  return j;
}

Result<SandboxSpec> SandboxSpec::from_json(const Json& j) {
  if (!j.is_object()) return fail(make_error(ErrorCode::kInternal, "corrupt sandbox record: not an object"));
  SandboxSpec s;
  NSBOX_CHECK((FieldReader{j, false}.read_all(s, [](SpecFieldOrigin) { return true; })));
  try {
    s.size = NSBOX_TRY(parse_size_tier(j.at("size").get<std::string>()));
    s.net = NSBOX_TRY(net::NetPolicy::from_json(j.at("net")));
    if (auto p = j.find("packages"); p != j.end() && !p->is_null()) s.packages = NSBOX_TRY(PackageSources::from_json(*p));
    for (const auto& m : j.value("mounts", Json::array())) s.mounts.push_back(NSBOX_TRY(bucket::BucketMount::from_json(m)));
    if (auto t = j.find("tools"); t != j.end() && !t->is_null()) s.tools = NSBOX_TRY(ToolsConfig::from_json(*t));
    s.accounts = NSBOX_TRY(SandboxAccounts::from_record({{"users", j.value("users", Json())}, {"groups", j.value("groups", Json())}}));
  } catch (const Json::exception& e) {
    return fail(make_error(ErrorCode::kInternal, std::string("corrupt sandbox record: ") + e.what()));
  }
  return s;
}

Result<void> read_request_fields(const Json& j, SandboxSpec& spec) {
  return FieldReader{j, true}.read_all(spec, [](SpecFieldOrigin o) { return o == SpecFieldOrigin::kRequest; });
}

bool is_request_field(const std::string& key) {
  bool found = false;
  SandboxSpec probe;
  spec_fields(probe, [&](const char* name, auto&, SpecFieldOrigin origin, auto...) {
    found = found || (origin == SpecFieldOrigin::kRequest && key == name);
  });
  return found;
}

bucket::BucketCredentials LaunchEnvelope::credentials_for(const std::string& mount_path) const {
  for (const auto& c : mount_credentials)
    if (c.mount_path == mount_path) return c.credentials;
  return {};
}

void LaunchEnvelope::wipe() {
  for (auto& c : mount_credentials) c.credentials.wipe();
  tool_keys.wipe();
}

Json LaunchEnvelope::to_json() const {
  Json env_pairs = Json::array();
  for (const auto& [k, v] : env) env_pairs.push_back({k, v});
  Json credentials = Json::array();
  for (const auto& c : mount_credentials)
    credentials.push_back({{"mount_path", c.mount_path}, {"credentials", c.credentials.to_json()}});
  return {{"env", env_pairs},        {"mount_credentials", credentials}, {"tool_keys", tool_keys.to_json()},
          {"kernel_zygote", kernel_zygote}, {"net_resolve", net_resolve},   {"helper_netns", helper_netns}};
}

Result<LaunchEnvelope> LaunchEnvelope::from_json(const Json& j) {
  try {
    LaunchEnvelope e;
    for (const auto& kv : j.value("env", Json::array())) e.env.emplace_back(kv.at(0).get<std::string>(), kv.at(1).get<std::string>());
    for (const auto& c : j.value("mount_credentials", Json::array()))
      e.mount_credentials.push_back({c.at("mount_path").get<std::string>(),
                                     bucket::BucketCredentials::from_json(c.value("credentials", Json::object()))});
    e.tool_keys = ToolKeys::from_json(j.value("tool_keys", Json()));
    e.kernel_zygote = j.value("kernel_zygote", "");
    e.net_resolve = j.value("net_resolve", std::map<std::string, std::string>{});
    e.helper_netns = j.value("helper_netns", "");
    return e;
  } catch (const Json::exception& e) {
    return fail(make_error(ErrorCode::kProtocol, std::string("malformed launch envelope: ") + e.what()));
  }
}

int mounts_start_bound_ms(const std::vector<bucket::BucketMount>& mounts) {
  int total = 0;
  for (const auto& m : mounts)
    total += m.strategy == bucket::MountStrategy::kBuiltin ? kBucketServerReadyMs  // check and mount
                                                           : kBucketServerReadyMs + kHelperMountTimeoutMs;  // check, then the tool
  return total;
}

}  // namespace nsbox
