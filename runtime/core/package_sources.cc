#include "runtime/core/package_sources.h"

#include <cctype>

namespace nsbox {

using protocol::Json;

namespace {

Error invalid(const std::string& message, const std::string& hint = "") {
  return make_error(ErrorCode::kInvalidArgument, "packages: " + message, hint);
}

// A distribution name as PEP 503 normalises it.
std::string normalize_distribution(const std::string& name) {
  std::string out;
  for (char c : name) {
    char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (l == '_' || l == '.') l = '-';
    if (l == '-' && !out.empty() && out.back() == '-') continue;
    out.push_back(l);
  }
  return out;
}

// The host and port of an index URL (already checked to be http:// or https://).
Result<std::pair<std::string, uint16_t>> index_authority(const std::string& url) {
  std::string_view rest = std::string_view(url).substr(url.find("://") + 3);
  std::string_view authority = rest.substr(0, rest.find_first_of("/?#"));
  if (authority.find('@') != std::string_view::npos) return fail(invalid("the index URL may not hold credentials"));
  std::string host;
  uint16_t port = 0;
  if (!net::split_authority(authority, url.starts_with("https") ? 443 : 80, host, port))
    return fail(invalid("the index URL " + url + " has no host"));
  return std::pair{host, port};
}

}  // namespace

Json PackageSources::to_json() const {
  Json j = {{"auto_install", auto_install}, {"allow", allow}};
  if (!pip_index.empty()) j["pip_index"] = pip_index;
  if (!wheelhouse.empty()) j["wheelhouse"] = wheelhouse;
  return j;
}

Result<PackageSources> PackageSources::from_json(const Json& j) {
  if (!j.is_object()) return fail(invalid("must be an object"));
  PackageSources p;
  for (const auto& [key, value] : j.items()) {
    if (key == "pip_index" || key == "wheelhouse") {
      if (!value.is_string()) return fail(invalid("\"" + key + "\" must be a string"));
      (key == "pip_index" ? p.pip_index : p.wheelhouse) = value.get<std::string>();
    } else if (key == "auto_install") {
      if (!value.is_boolean()) return fail(invalid("\"auto_install\" must be true or false"));
      p.auto_install = value.get<bool>();
    } else if (key == "allow") {
      if (!value.is_array()) return fail(invalid("\"allow\" must be a list of distribution names"));
      for (const auto& d : value) {
        if (!d.is_string() || d.get<std::string>().empty() || d.get<std::string>().size() > 128)
          return fail(invalid("\"allow\" must be a list of distribution names"));
        for (char c : d.get<std::string>())
          if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.')
            return fail(invalid("'" + d.get<std::string>() + "' is not a distribution name"));
        p.allow.push_back(normalize_distribution(d.get<std::string>()));
      }
    } else {
      return fail(invalid("unknown field \"" + key + "\""));
    }
  }
  if (!p.pip_index.empty() && !p.pip_index.starts_with("http://") && !p.pip_index.starts_with("https://"))
    return fail(invalid("the index " + p.pip_index + " is not an http:// or https:// URL"));
  for (char c : p.pip_index)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f)
      return fail(invalid("the index URL has a space or a control character"));
  if (!p.pip_index.empty()) NSBOX_CHECK(index_authority(p.pip_index));
  if (!p.wheelhouse.empty() && p.wheelhouse[0] != '/')
    return fail(invalid("the wheelhouse " + p.wheelhouse + " must be an absolute path"));
  return p;
}

EnvList PackageSources::environment() const {
  EnvList env = {
      {"PYTHONUSERBASE", "/home/user/.local"},
      // Debian's Python refuses `pip install --user` without it (PEP 668); the user site is
      // the sandbox's own, so nothing of the system's can break.
      {"PIP_BREAK_SYSTEM_PACKAGES", "1"},
      {"PIP_USER", "1"},
      {"PIP_DISABLE_PIP_VERSION_CHECK", "1"},
      {"PIP_NO_INPUT", "1"},
      // Read by the kernel: "on", "off" (turned off), or "no-source" (then a missing module's
      // error says how to give one).
      {"NSBOX_AUTO_INSTALL", !auto_install ? "off" : any_source() ? "on" : "no-source"},
  };
  if (!pip_index.empty()) {
    env.emplace_back("PIP_INDEX_URL", pip_index);
    // pip ignores an http:// index unless its host is trusted: the user named it on the
    // host side, which is that trust (https is still the better choice).
    if (pip_index.starts_with("http://"))
      if (auto authority = index_authority(pip_index)) env.emplace_back("PIP_TRUSTED_HOST", authority->first);
  }
  if (!wheelhouse.empty()) {
    env.emplace_back("PIP_FIND_LINKS", kWheelhouseInside);
    if (pip_index.empty()) env.emplace_back("PIP_NO_INDEX", "1");  // offline: the wheelhouse only
  }
  if (!allow.empty()) {
    std::string list;
    for (const auto& d : allow) list += (list.empty() ? "" : ",") + d;
    env.emplace_back("NSBOX_PACKAGES_ALLOW", list);
  }
  return env;
}

Result<net::NetPolicy> PackageSources::network_policy(const Json& net) const {
  Json base = net, privates = Json::array();
  if (net.is_object() && net.contains("allow_private")) {
    privates = net["allow_private"];
    base.erase("allow_private");
  }
  net::NetPolicy policy = NSBOX_TRY(net::NetPolicy::from_json(base));
  if (!pip_index.empty() && policy.mode != network::Mode::kHost) {
    auto [host, port] = NSBOX_TRY(index_authority(pip_index));
    if (policy.mode == network::Mode::kNone) policy = {network::Mode::kAllow, {}};
    if (!policy.allow.match(host, port)) {
      Json grown = policy.allow.to_json();
      grown["allow"].push_back((host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port));
      policy.allow = NSBOX_TRY(net::AllowList::from_json(grown));
    }
  }
  if (!privates.empty()) {
    if (policy.mode != network::Mode::kAllow)
      return fail(invalid("--net-allow-private needs --net allow=... (or --pip-index)", "list the names with --net allow= first"));
    Json with = policy.allow.to_json();
    with["allow_private"] = privates;
    policy.allow = NSBOX_TRY(net::AllowList::from_json(with));
  }
  return policy;
}

}  // namespace nsbox
