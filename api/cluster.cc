#include "api/cluster.h"

#include <cmath>
#include <cstdlib>

#include "api/access.h"
#include "isolation/sys/files.h"
#include "runtime/core/state_store.h"

namespace nsbox::api {
namespace {

Error bad(const std::string& message, const std::string& hint = "") {
  return make_error(ErrorCode::kInvalidArgument, message, hint);
}

// http://host[:port] or https://..., nothing after: requests append their own path.
Result<std::string> base_url(const std::string& url, const std::string& flag) {
  bool scheme = url.starts_with("http://") || url.starts_with("https://");
  auto host = url.substr(scheme ? url.find("//") + 2 : 0);
  if (!scheme || host.empty() || host.find_first_of("/?#@ ") != std::string::npos)
    return fail(bad(flag + ": '" + url + "' is not a base URL", "write http://HOST:PORT, without a path"));
  return url;
}

}  // namespace

Result<ClusterConfig> ClusterConfig::parse(const ClusterFlags& flags) {
  ClusterConfig c;
  if (flags.shard) {
    if (auto ok = validate_shard(*flags.shard); !ok) return fail(std::move(ok.error()).context("--shard"));
    if (!flags.snapshot_store)
      return fail(bad("--shard needs --snapshot-store", "a drain puts the server's sandboxes there, for any peer to restore"));
    c.shard_ = *flags.shard;
  }
  if (flags.peers) {
    if (!flags.shard) return fail(bad("--peers needs --shard"));
    const std::string& p = *flags.peers;
    if (p.find("{shard}") != std::string::npos) {
      std::string sample = p;
      sample.replace(sample.find("{shard}"), 7, "x");
      NSBOX_CHECK(base_url(sample, "--peers"));
      c.peer_template_ = p;
    } else {
      for (size_t at = 0; at <= p.size();) {
        auto comma = p.find(',', at);
        std::string item = p.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
        at = comma == std::string::npos ? p.size() + 1 : comma + 1;
        auto eq = item.find('=');
        if (eq == std::string::npos)
          return fail(bad("--peers: '" + item + "' is neither SHARD=URL nor a template with {shard}"));
        std::string shard = item.substr(0, eq);
        if (auto ok = validate_shard(shard); !ok) return fail(std::move(ok.error()).context("--peers"));
        c.peer_list_[shard] = NSBOX_TRY(base_url(item.substr(eq + 1), "--peers"));
      }
    }
    if (!flags.peer_token_file) return fail(bad("--peers needs --peer-token-file", "the token servers send each other"));
  }
  if (flags.peer_token_file) {
    // Never made here: a server that made its own would be refused by every peer.
    if (!files::exists(*flags.peer_token_file))
      return fail(bad("--peer-token-file " + *flags.peer_token_file + " does not exist",
                      "every server needs the same token: make it once (32 random bytes, base64url) and give it to all"));
    auto token = load_or_make_secret(*flags.peer_token_file, random_token);
    if (!token) return fail(std::move(token.error()).context("--peer-token-file"));
    c.peer_token_ = std::move(*token);
  }
  if (flags.capacity) {
    char* end = nullptr;
    unsigned long long n = std::strtoull(flags.capacity->c_str(), &end, 10);
    if (flags.capacity->empty() || *end || n == 0 || n > 100000) return fail(bad("--capacity '" + *flags.capacity + "': a number in 1..100000"));
    c.capacity_ = n;
  }
  if (flags.drain_grace) {
    char* end = nullptr;
    double s = std::strtod(flags.drain_grace->c_str(), &end);
    if (flags.drain_grace->empty() || *end || !(s >= 0) || s > 86400 || std::isnan(s))
      return fail(bad("--drain-grace '" + *flags.drain_grace + "': seconds in 0..86400"));
    c.drain_grace_s_ = s;
  }
  return c;
}

std::optional<std::string> ClusterConfig::peer_url(const std::string& shard) const {
  if (shard.empty() || shard == shard_ || !validate_shard(shard)) return std::nullopt;
  if (!peer_template_.empty()) {
    std::string url = peer_template_;
    for (size_t at; (at = url.find("{shard}")) != std::string::npos;) url.replace(at, 7, shard);
    return url;
  }
  auto it = peer_list_.find(shard);
  if (it == peer_list_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> ClusterConfig::listed_peers() const {
  std::vector<std::string> out;
  for (const auto& [shard, url] : peer_list_)
    if (shard != shard_) out.push_back(shard);
  return out;
}

}  // namespace nsbox::api
