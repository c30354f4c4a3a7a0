#include "runtime/core/net_policy.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <utility>

namespace nsbox::net {

using protocol::Json;

namespace {

constexpr size_t kMaxHostName = 253;  // RFC 1035's 255 octets on the wire, less the length bytes

Error invalid(const std::string& message, const std::string& hint = "") {
  return make_error(ErrorCode::kInvalidArgument, message,
                    hint.empty() ? "--net allow=HOST[,*.DOMAIN,HOST:PORT...] (docs/network.md)" : hint);
}


Result<AllowEntry> parse_entry(std::string_view text) {
  AllowEntry e;
  std::string host;
  uint16_t port = 0;
  // "*.example.com[:port]" is split after its "*.": the rest is an authority.
  e.wildcard = text.starts_with("*.");
  std::string_view authority = e.wildcard ? text.substr(2) : text;
  if (split_authority(authority, 0, host, port)) e.port = port;  // a port given
  else if (!split_authority(authority, 80, host, port))
    return fail(invalid("the allowlist entry '" + std::string(text) + "' is not host, *.domain or host:port (port 1 to 65535)"));
  e.host = normalize_host(host);
  if (e.host.empty() || (e.wildcard && e.host.find('.') == std::string::npos))
    return fail(invalid("the allowlist entry '" + std::string(text) + "' is not a host name, *.domain or host:port",
                        e.wildcard ? "a wildcard needs a domain of two labels at least: *.example.com" : ""));
  // A name is at most 253 characters: a domain longer than 251 has no room for "x." under it.
  if (e.wildcard && e.host.size() > kMaxHostName - 2)
    return fail(invalid("the allowlist entry '*." + e.host + "' can match no name: its domain has " +
                        std::to_string(e.host.size()) + " characters, and a name under it would pass " +
                        std::to_string(kMaxHostName) + ", the longest a DNS name can be"));
  return e;
}

}  // namespace

std::vector<std::string> split_list(std::string_view text) {
  std::vector<std::string> out;
  while (!text.empty()) {
    size_t comma = text.find(',');
    std::string_view part = text.substr(0, comma);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
    if (!part.empty()) out.emplace_back(part);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return out;
}

bool split_authority(std::string_view authority, uint16_t default_port, std::string& host, uint16_t& port) {
  std::string_view h = authority, p;
  if (authority.starts_with("[")) {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) return false;
    h = authority.substr(1, close - 1);
    std::string_view rest = authority.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return false;
      p = rest.substr(1);
    }
  } else if (size_t colon = authority.find(':'); colon != std::string_view::npos) {
    h = authority.substr(0, colon);
    p = authority.substr(colon + 1);
  }
  if (h.empty()) return false;
  unsigned value = default_port;
  if (!p.empty()) {
    auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), value);
    if (ec != std::errc() || end != p.data() + p.size() || value == 0 || value > 65535) return false;
  } else if (default_port == 0) {
    return false;
  }
  host = std::string(h);
  port = static_cast<uint16_t>(value);
  return true;
}

std::string normalize_host(std::string_view host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);
  if (host.empty() || host.size() > kMaxHostName) return "";
  std::string out;
  for (char c : host) {
    unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '-' || c == '.' || c == '_' || c == ':') out.push_back(static_cast<char>(std::tolower(u)));
    else return "";
  }
  if (out.front() == '.' || out.back() == '.' || out.find("..") != std::string::npos) return "";
  return out;
}

EnvList proxy_environment() {
  const std::string url = "http://127.0.0.1:" + std::to_string(kProxyPort);
  const std::string local = "localhost,127.0.0.1,::1";
  return {{"HTTP_PROXY", url}, {"HTTPS_PROXY", url}, {"http_proxy", url}, {"https_proxy", url},
          {"NO_PROXY", local}, {"no_proxy", local}};
}

std::string AllowEntry::text() const {
  std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return (wildcard ? "*." : "") + h + (port ? ":" + std::to_string(port) : "");
}

const AllowEntry* AllowList::match(std::string_view host_in, uint16_t port) const {
  std::string host = normalize_host(host_in);
  if (host.empty()) return nullptr;
  for (const auto& e : entries) {
    bool port_ok = e.port ? e.port == port : (port == 80 || port == 443);
    if (!port_ok) continue;
    if (!e.wildcard && host == e.host) return &e;
    if (e.wildcard && host.size() > e.host.size() + 1 && host.ends_with(e.host) &&
        host[host.size() - e.host.size() - 1] == '.')
      return &e;
  }
  return nullptr;
}

bool AllowList::private_allowed(std::string_view host_in) const {
  std::string host = normalize_host(host_in);
  return std::find(private_names.begin(), private_names.end(), host) != private_names.end();
}

Json AllowList::to_json() const {
  Json allow = Json::array();
  for (const auto& e : entries) allow.push_back(e.text());
  return {{"allow", allow}, {"allow_private", private_names}};
}

Result<AllowList> AllowList::from_json(const Json& j) {
  if (!j.is_object()) return fail(invalid("\"net\" must be \"none\", \"host\" or {\"allow\": [...]}"));
  for (const auto& [key, value] : j.items())
    if (key != "allow" && key != "allow_private") return fail(invalid("\"net\" has an unknown field \"" + key + "\""));
  AllowList list;
  auto strings = [&](const char* field) -> Result<std::vector<std::string>> {
    std::vector<std::string> out;
    auto it = j.find(field);
    if (it == j.end()) return out;
    if (!it->is_array()) return fail(invalid(std::string("\"net\".") + field + " must be an array of strings"));
    for (const auto& v : *it) {
      if (!v.is_string()) return fail(invalid(std::string("\"net\".") + field + " must be an array of strings"));
      out.push_back(v.get<std::string>());
    }
    return out;
  };
  std::vector<std::string> allow = NSBOX_TRY(strings("allow")), privates = NSBOX_TRY(strings("allow_private"));
  if (allow.size() > kMaxEntries) return fail(invalid("more than " + std::to_string(kMaxEntries) + " allowlist entries"));
  for (const auto& text : allow) list.entries.push_back(NSBOX_TRY(parse_entry(text)));
  for (const auto& text : privates) {
    std::string name = normalize_host(text);
    bool listed = std::any_of(list.entries.begin(), list.entries.end(),
                              [&](const AllowEntry& e) { return !e.wildcard && e.host == name; });
    if (!listed)
      return fail(invalid("--net-allow-private names '" + text + "', which is not a host of the allowlist",
                          "name a host that --net allow= lists, e.g. --net allow=pypi.local --net-allow-private pypi.local"));
    list.private_names.push_back(name);
  }
  return list;
}

Result<AllowList> AllowList::parse(std::string_view entries, std::string_view private_names) {
  return from_json({{"allow", split_list(entries)}, {"allow_private", split_list(private_names)}});
}

std::string AllowList::describe() const {
  std::string out;
  for (const auto& e : entries) out += (out.empty() ? "" : ", ") + e.text();
  if (out.empty()) out = "(nothing)";
  if (!private_names.empty()) {
    out += " (private allowed:";
    for (const auto& p : private_names) out += " " + p;
    out += ")";
  }
  return out;
}

Result<NetPolicy> NetPolicy::from_json(const Json& net) {
  NetPolicy p;
  if (net.is_string()) {
    return parse(net.get<std::string>());
  }
  p.mode = network::Mode::kAllow;
  p.allow = NSBOX_TRY(AllowList::from_json(net));
  return p;
}

Result<NetPolicy> NetPolicy::parse(std::string_view net) {
  NetPolicy p;
  if (net.starts_with("allow=")) {
    p.mode = network::Mode::kAllow;
    p.allow = NSBOX_TRY(AllowList::parse(net.substr(6), ""));
    return p;
  }
  if (net == "allow") return fail(invalid("--net allow needs its list: --net allow=pypi.org,*.pythonhosted.org"));
  p.mode = NSBOX_TRY(network::parse_mode(net.empty() ? "none" : net));
  return p;
}

Json NetPolicy::to_json() const {
  if (mode == network::Mode::kAllow) return allow.to_json();
  return std::string(network::mode_name(mode));
}

std::string NetPolicy::describe() const {
  if (mode == network::Mode::kAllow) return "allow: " + allow.describe();
  if (mode == network::Mode::kHost) return "host (the host's network: not isolation)";
  if (mode == network::Mode::kInternet)
    return "internet (NAT; loopback, private, link-local/metadata, CGNAT and multicast refused)";
  return std::string(network::mode_name(mode));
}

}  // namespace nsbox::net
