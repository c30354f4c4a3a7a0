// Signed download links to a file of a sandbox's /mnt/files: made by `nsbox serve`
// (POST .../files:sign) and by a sandbox's tool bridge (upload_local_file under the
// server), checked by the server when one is opened. One implementation for both, so a
// link made by either opens with the other.
//
//   /v1/sandboxes/<id>/files?path=<path>&expires=<unix s>&signature=<base64url HMAC-SHA256>
//
// The HMAC (OpenSSL) covers the sandbox's id, the path as written in the link and the
// expiry, under a 32-byte key the server keeps beside its token.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace nsbox::links {

class LinkSigner {
 public:
  explicit LinkSigner(std::string key) : key_(std::move(key)) {}
  // The signature of a download of `path` (as given) from `sandbox_id` until `expires`
  // (Unix seconds): base64url of HMAC-SHA256.
  std::string sign(std::string_view sandbox_id, std::string_view path, int64_t expires) const;
  // The signature matches and `now` is before `expires`.
  bool verify(std::string_view sandbox_id, std::string_view path, int64_t expires, std::string_view signature,
              int64_t now) const;
  // The link's path and query (to be put after the server's public URL).
  std::string link(std::string_view sandbox_id, std::string_view path, int64_t expires) const;
  // For the server to hand to the tool bridges of its sandboxes (their links open here).
  const std::string& key() const { return key_; }

 private:
  std::string key_;
};

// Equal, in time that depends only on the length of `b`.
bool constant_time_equal(std::string_view a, std::string_view b);
std::string base64url(std::string_view bytes);

}  // namespace nsbox::links
