#include "isolation/sys/sha256.h"

namespace nsbox {

Sha256::Sha256() { sha256_init(&ctx_); }

void Sha256::update(std::string_view data) {
  sha256_update(&ctx_, data.size(), reinterpret_cast<const uint8_t*>(data.data()));
}

std::string Sha256::hex_digest() {
  uint8_t digest[SHA256_DIGEST_SIZE];
  sha256_digest(&ctx_, sizeof digest, digest);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * sizeof digest);
  for (uint8_t b : digest) {
    out += kHex[b >> 4];
    out += kHex[b & 0xf];
  }
  return out;
}

std::string sha256_hex(std::string_view data) {
  Sha256 s;
  s.update(data);
  return s.hex_digest();
}

}  // namespace nsbox
