// Signed download links to a file of a sandbox's /mnt/files: made by `nsbox serve`
// (POST .../files:sign) and by a sandbox's tool bridge (upload_local_file under the
// server), checked by the server when one is opened. One implementation for both, so a
// link made by either opens with the other.
//
//   /v1/sandboxes/<id>/files?path=<path>&expires=<unix s>&signature=<base64url HMAC-SHA256>
//
// The HMAC (OpenSSL) covers the sandbox's id, the path as written in the link and the
// expiry, under that sandbox's own key: HMAC-SHA256 of its id under the 32-byte master key
// the server keeps beside its token. The server holds the master key and derives a
// sandbox's key to check its links; a sandbox's tool bridge (outside the sandbox, but
// parsing what the sandbox sends) holds its own sandbox's key only, so whatever takes the
// bridge over signs links to that sandbox's files and no other's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace nsbox::links {

// Derived keys are text (base64url of an HMAC-SHA256), as keys travel in JSON.
// The master key of a set of shards, derived from the peer token they share.
std::string shard_set_link_key(std::string_view peer_token);
// The key of one sandbox's links, derived from the server's master key.
std::string sandbox_link_key(std::string_view master_key, std::string_view sandbox_id);

class LinkSigner {
 public:
  // The server's: signs and checks the links of every sandbox.
  explicit LinkSigner(std::string master_key) : key_(std::move(master_key)) {}
  // A tool bridge's: signs the links of `sandbox_id` only, with its key (sandbox_link_key).
  static LinkSigner of_sandbox(std::string sandbox_key, std::string sandbox_id);

  // The signature of a download of `path` (as given) from `sandbox_id` until `expires`
  // (Unix seconds): base64url of HMAC-SHA256. Empty for another sandbox than a sandbox
  // signer's own.
  std::string sign(std::string_view sandbox_id, std::string_view path, int64_t expires) const;
  // The signature matches and `now` is before `expires`.
  bool verify(std::string_view sandbox_id, std::string_view path, int64_t expires, std::string_view signature,
              int64_t now) const;
  // The link's path and query (to be put after the server's public URL).
  std::string link(std::string_view sandbox_id, std::string_view path, int64_t expires) const;
  // The key it signs with: the server's master key (which the runtime derives each
  // launched sandbox's key from), or a sandbox signer's own.
  const std::string& key() const { return key_; }

 private:
  std::string key_;
  std::string sandbox_;  // a sandbox signer's one sandbox; empty for the master
};

// Equal, in time that depends only on the length of `b`.
bool constant_time_equal(std::string_view a, std::string_view b);
std::string base64url(std::string_view bytes);

}  // namespace nsbox::links
