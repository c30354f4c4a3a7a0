// One `nsbox serve` among several (docs/semantics.md, "Sharded serve"): its shard, how
// to reach the others, the credential between them, and what readiness and drain go by.
//
//   --shard NAME              ids made here are sbx-NAME-<random>
//   --peers TEMPLATE|LIST     http://nsbox-{shard}.nsbox-peers:8080, or a=URL,b=URL
//   --peer-token-file PATH    the bearer token servers send each other (first line; the
//                             same file on every server, never made by one)
//   --capacity N              at most N sandboxes here (readiness says when it is full)
//   --drain-grace SECONDS     how long a drain lets cells and commands finish (900)
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "isolation/sys/error.h"

namespace nsbox::api {

struct ClusterFlags {
  std::optional<std::string> shard, peers, peer_token_file, capacity, drain_grace;
  bool snapshot_store = false;  // --snapshot-store was given (a shard needs one)
};

class ClusterConfig {
 public:
  // Checked together: a shard needs a snapshot store (a drain puts its sandboxes there)
  // and, with peers, a peer token.
  static Result<ClusterConfig> parse(const ClusterFlags& flags);

  bool sharded() const { return !shard_.empty(); }
  const std::string& shard() const { return shard_; }
  const std::string& peer_token() const { return peer_token_; }
  uint64_t capacity() const { return capacity_; }  // 0: no limit of its own
  double drain_grace_s() const { return drain_grace_s_; }

  // The base URL of a shard's server; none for our own shard or an unknown one.
  std::optional<std::string> peer_url(const std::string& shard) const;
  // The peers a name is looked up on: the list's; a template names no shard of its own.
  std::vector<std::string> listed_peers() const;

 private:
  std::string shard_, peer_template_, peer_token_;
  std::map<std::string, std::string> peer_list_;
  uint64_t capacity_ = 0;
  double drain_grace_s_ = 900;
};

}  // namespace nsbox::api
