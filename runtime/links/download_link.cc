#include "runtime/links/download_link.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>


#include "isolation/sys/uri.h"

namespace nsbox::links {

std::string base64url(std::string_view bytes) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    out += {kAlphabet[v >> 18], kAlphabet[(v >> 12) & 63], kAlphabet[(v >> 6) & 63], kAlphabet[v & 63]};
  }
  if (i + 1 == bytes.size()) {
    uint32_t v = uint8_t(bytes[i]) << 16;
    out += {kAlphabet[v >> 18], kAlphabet[(v >> 12) & 63]};
  } else if (i + 2 == bytes.size()) {
    uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
    out += {kAlphabet[v >> 18], kAlphabet[(v >> 12) & 63], kAlphabet[(v >> 6) & 63]};
  }
  return out;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < b.size(); ++i) diff |= static_cast<unsigned char>(i < a.size() ? a[i] ^ b[i] : 1);
  return diff == 0;
}

namespace {

std::string hmac_sha256(std::string_view key, std::string_view text) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  ::HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(text.data()),
         text.size(), mac, &len);
  return std::string(reinterpret_cast<const char*>(mac), len);
}

}  // namespace

std::string shard_set_link_key(std::string_view peer_token) {
  return base64url(hmac_sha256(peer_token, "nsbox-shard-set-link-key-v1"));
}

std::string sandbox_link_key(std::string_view master_key, std::string_view sandbox_id) {
  return base64url(hmac_sha256(master_key, "nsbox-sandbox-link-key-v1\n" + std::string(sandbox_id)));
}

LinkSigner LinkSigner::of_sandbox(std::string sandbox_key, std::string sandbox_id) {
  LinkSigner signer(std::move(sandbox_key));
  signer.sandbox_ = std::move(sandbox_id);
  return signer;
}

std::string LinkSigner::sign(std::string_view sandbox_id, std::string_view path, int64_t expires) const {
  if (!sandbox_.empty() && sandbox_id != sandbox_) return "";
  // No two links sign the same text: the id has no newline (ids and names are checked)
  // and the expiry, last, is digits only, so the path is what lies between them.
  std::string text = "nsbox-download-v1\n" + std::string(sandbox_id) + "\n" + std::string(path) + "\n" + std::to_string(expires);
  std::string key = sandbox_.empty() ? sandbox_link_key(key_, sandbox_id) : key_;
  return base64url(hmac_sha256(key, text));
}

bool LinkSigner::verify(std::string_view sandbox_id, std::string_view path, int64_t expires, std::string_view signature,
                        int64_t now) const {
  std::string expected = sign(sandbox_id, path, expires);
  bool good = !expected.empty() && constant_time_equal(signature, expected);
  return good && now < expires;
}

std::string LinkSigner::link(std::string_view sandbox_id, std::string_view path, int64_t expires) const {
  return "/v1/sandboxes/" + std::string(sandbox_id) + "/files?path=" + sys::uri_encode(path, true) + "&expires=" +
         std::to_string(expires) + "&signature=" + sign(sandbox_id, path, expires);
}


}  // namespace nsbox::links
