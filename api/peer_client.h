// Requests from one `nsbox serve` to another (docs/semantics.md, "Sharded serve"): a
// request for a sandbox of another shard relayed to its owner and the owner's answer
// relayed back as it comes (cells' and commands' streams, file transfers, tool-call
// events), and small JSON questions to peers (where is a name).
//
//   client ──► edge: token checked ──► PeerClient::forward ──► owner (peer token)
//          ◄── relay_head / relay_bytes / relay_end ◄──────────┘
//
// Through nsbox's HTTP client (mounts/http/client.h): its handles are kept with their
// connections for the next request; never through the process's proxy (peers are ours).
// A peer that does not accept the connection within 2 s is unreachable; an accepted
// request has no time limit of its own (a cell may run for hours): it ends with the
// owner's answer, the client leaving or the server stopping (the Exchange's fds).
#pragma once

#include <string>
#include <utility>

#include "api/exchange.h"
#include "mounts/http/client.h"

namespace nsbox::api {

class PeerClient {
 public:
  // `token`: the peer credential sent as the bearer token; `shard`: ours, sent in
  // X-Nsbox-Forwarded-By so that the owner never relays the request again.
  PeerClient(std::string token, std::string shard);

  // Relays `x`'s request to `base_url` (scheme://host:port) and its answer back; with
  // the peer credential, or (`with_credential` false: a request admitted by a download
  // link's signature alone) with none, so that the owner checks the signature. An error
  // only when nothing reached the client: kOwnerUnavailable when the peer refused, did
  // not answer the connection, rejected our credential or failed before its answer's
  // first byte; kUnavailable when this server stops meanwhile.
  Result<void> forward(Exchange& x, const std::string& base_url, bool with_credential);
  // A path segment, percent-encoded.
  static std::string escape(const std::string& segment);

  // GET base_url + target with the peer credential: the status and the JSON answer
  // (at most 1 MiB), within `timeout_ms`.
  Result<std::pair<long, Json>> get_json(const std::string& base_url, const std::string& target, long timeout_ms);

 private:
  http::Headers headers(bool with_credential) const;

  std::string token_, shard_;
  http::Client http_;
};

}  // namespace nsbox::api
