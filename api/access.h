// Who may use the API: a bearer token for every request, and signed download links that
// need none until they expire.
//
// The token is the first line of a 0600 file (made on first start: 32 random bytes,
// base64url), compared in constant time. Links carry an expiry and an HMAC-SHA256
// (OpenSSL) of what they open, under a 32-byte key kept beside the token: altering the
// sandbox, the path or the expiry, or waiting past it, gets 403.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "isolation/sys/error.h"

namespace nsbox::api {

// A secret file: read when it exists, else made (0600, atomically, so that servers
// starting together agree on one). `make` gives the content of a new one.
Result<std::string> load_or_make_secret(const std::string& path, std::string (*make)());

std::string random_token();  // 32 random bytes, base64url without padding
std::string random_key();    // 32 random bytes

class BearerToken {
 public:
  explicit BearerToken(std::string token) : token_(std::move(token)) {}
  // "Bearer <token>", compared in constant time.
  bool accepts(std::string_view authorization_header) const;

 private:
  std::string token_;
};

class LinkSigner {
 public:
  explicit LinkSigner(std::string key) : key_(std::move(key)) {}
  // The signature of a download of `path` (as given) from `sandbox_id` until `expires`
  // (Unix seconds): base64url of HMAC-SHA256.
  std::string sign(std::string_view sandbox_id, std::string_view path, int64_t expires) const;
  // The signature matches and `now` is before `expires`.
  bool verify(std::string_view sandbox_id, std::string_view path, int64_t expires, std::string_view signature,
              int64_t now) const;

 private:
  std::string key_;
};

// Equal, in time that depends only on the length of `b`.
bool constant_time_equal(std::string_view a, std::string_view b);
std::string base64url(std::string_view bytes);

}  // namespace nsbox::api
