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
  // kBest uses the CPU's SHA extensions (x86 SHA-NI) when it has them, about ten
  // times the portable code's speed; kPortable exists so tests check both.
  enum class Engine { kBest, kPortable };
  explicit Sha256(Engine engine = Engine::kBest);
  static bool cpu_has_sha_extensions();
  void update(std::string_view data);
  std::string hex_digest();  // finishes; the object is spent

 private:
  void blocks(const unsigned char* p, size_t count);
  std::array<uint32_t, 8> h_;
  bool accelerated_;
  unsigned char buf_[64];
  size_t used_ = 0;
  uint64_t bits_ = 0;
};

std::string sha256_hex(std::string_view data);

}  // namespace nsbox
