// SHA-256 (FIPS 180-4), for the checksums the files API reports. Checked against the
// NIST test vectors and sha256sum (tests/unit/sha256_test.cc). Not for keys or signatures:
// those use OpenSSL.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace nsbox {

class Sha256 {
 public:
  Sha256();
  void update(std::string_view data);
  std::string hex_digest();  // finishes; the object is spent

 private:
  void block(const unsigned char* p);
  std::array<uint32_t, 8> h_;
  unsigned char buf_[64];
  size_t used_ = 0;
  uint64_t bits_ = 0;
};

std::string sha256_hex(std::string_view data);

}  // namespace nsbox
