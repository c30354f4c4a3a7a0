#include <catch2/catch.hpp>

#include "isolation/sys/sha256.h"
#include "tests/support/process.h"

using namespace nsbox;

TEST_CASE("SHA-256 matches the NIST vectors and sha256sum, however the input is split") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  std::string million(1000000, 'a');
  CHECK(sha256_hex(million) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  Sha256 pieces;
  for (size_t i = 0; i < million.size(); i += 997) pieces.update(std::string_view(million).substr(i, 997));
  CHECK(pieces.hex_digest() == sha256_hex(million));
  std::string binary;
  for (int i = 0; i < 100000; ++i) binary += static_cast<char>((i * 131) & 0xff);
  auto r = test::run_process({"/usr/bin/sha256sum"}, {.stdin_data = binary});
  CHECK(r.out.substr(0, 64) == sha256_hex(binary));
}

TEST_CASE("SHA-256: a stream cut anywhere gives the digest sha256sum gives") {
  std::string data;
  for (int i = 0; i < 5000; ++i) data += static_cast<char>((i * 7919 + 13) & 0xff);
  for (size_t len : {0, 1, 55, 56, 63, 64, 65, 119, 128, 1000, 4096, 5000}) {
    auto whole = std::string_view(data).substr(0, len);
    size_t third = len / 3;
    Sha256 split;
    split.update(whole.substr(0, third));
    split.update(whole.substr(third, third));
    split.update(whole.substr(2 * third));
    auto r = test::run_process({"/usr/bin/sha256sum"}, {.stdin_data = std::string(whole)});
    INFO("length " << len);
    CHECK(split.hex_digest() == r.out.substr(0, 64));
  }
}
