// SHA-256, for the checksums the files API reports: Debian's nettle, which picks the
// CPU's SHA extensions at run time and links statically into the CLI (docs/design.md,
// "Files and volumes"). Keys and signatures use OpenSSL, in the programs that link it.
#pragma once

#include <nettle/sha2.h>

#include <string>
#include <string_view>

namespace nsbox {

class Sha256 {
 public:
  Sha256();
  void update(std::string_view data);
  std::string hex_digest();  // finishes; the object is spent

 private:
  sha256_ctx ctx_;
};

std::string sha256_hex(std::string_view data);

}  // namespace nsbox
