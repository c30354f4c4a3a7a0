// Who may use the API: a bearer token for every request, and signed download links
// (runtime/links/download_link.h) that need none until they expire.
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
#include "runtime/links/download_link.h"

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

// The links' signer and its helpers are shared with the tool bridge.
using links::base64url;
using links::constant_time_equal;
using links::LinkSigner;

}  // namespace nsbox::api
