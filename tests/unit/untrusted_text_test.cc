// Bytes from a sandbox on their way to JSON and to a terminal: UTF-8 is checked exactly
// as Unicode defines it (JSON would rewrite anything else), and names shown to a person
// cannot carry control sequences.
#include <catch2/catch.hpp>

#include "cli/output.h"
#include "runtime/protocol/frame.h"

using nsbox::protocol::is_valid_utf8;
using nsbox::protocol::utf8_sequence_length;

TEST_CASE("UTF-8 validation accepts every well-formed sequence and nothing else") {
  CHECK(is_valid_utf8(""));
  CHECK(is_valid_utf8("plain ascii"));
  CHECK(is_valid_utf8("\xc2\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));  // © € 😀
  CHECK(is_valid_utf8("\xed\x9f\xbf"));                              // U+D7FF, just below the surrogates
  CHECK(is_valid_utf8("\xee\x80\x80"));                              // U+E000, just above
  CHECK(is_valid_utf8("\xf4\x8f\xbf\xbf"));                          // U+10FFFF, the last code point
  // Overlong forms of '/', of U+07FF and of U+FFFF.
  CHECK_FALSE(is_valid_utf8("\xc0\xaf"));
  CHECK_FALSE(is_valid_utf8("\xc1\xbf"));
  CHECK_FALSE(is_valid_utf8("\xe0\x9f\xbf"));
  CHECK_FALSE(is_valid_utf8("\xf0\x8f\xbf\xbf"));
  // Surrogates, and past U+10FFFF.
  CHECK_FALSE(is_valid_utf8("\xed\xa0\x80"));
  CHECK_FALSE(is_valid_utf8("\xed\xbf\xbf"));
  CHECK_FALSE(is_valid_utf8("\xf4\x90\x80\x80"));
  CHECK_FALSE(is_valid_utf8("\xf5\x80\x80\x80"));
  // Truncated, stray continuation, bytes that never occur.
  CHECK_FALSE(is_valid_utf8("\xe2\x82"));
  CHECK_FALSE(is_valid_utf8("\x80"));
  CHECK_FALSE(is_valid_utf8("\xff"));
  CHECK(utf8_sequence_length("\xf0\x9f\x98\x80rest") == 4);
  CHECK(utf8_sequence_length("\xe2\x28\xa1") == 0);
}

TEST_CASE("whatever is valid UTF-8 survives a JSON round trip byte for byte") {
  // Every code point's encoding, in chunks: what is_valid_utf8 accepts, JSON keeps.
  std::string text;
  for (uint32_t cp = 0x20; cp <= 0x10FFFF; cp += 97) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    if (cp < 0x80) text += char(cp);
    else if (cp < 0x800) text += {char(0xC0 | cp >> 6), char(0x80 | (cp & 63))};
    else if (cp < 0x10000) text += {char(0xE0 | cp >> 12), char(0x80 | ((cp >> 6) & 63)), char(0x80 | (cp & 63))};
    else text += {char(0xF0 | cp >> 18), char(0x80 | ((cp >> 12) & 63)), char(0x80 | ((cp >> 6) & 63)), char(0x80 | (cp & 63))};
  }
  REQUIRE(is_valid_utf8(text));
  nlohmann::json m;
  nsbox::protocol::put_bytes(m, text);
  auto back = nlohmann::json::parse(nsbox::protocol::encode(m).substr(4));
  CHECK(nsbox::protocol::get_bytes(back) == text);
  // And what it refuses goes as base64, also unchanged.
  for (std::string bad : {std::string("\xc0\xaf"), std::string("\xed\xa0\x80 x"), std::string("\xf4\x90\x80\x80")}) {
    nlohmann::json b;
    nsbox::protocol::put_bytes(b, bad);
    CHECK(b.contains("data_b64"));
    CHECK(nsbox::protocol::get_bytes(nlohmann::json::parse(nsbox::protocol::encode(b).substr(4))) == bad);
  }
}

TEST_CASE("names shown on a terminal have their control bytes and non-UTF-8 bytes escaped") {
  using nsbox::cli::printable;
  CHECK(printable("report.csv") == "report.csv");
  CHECK(printable("caf\xc3\xa9") == "caf\xc3\xa9");
  CHECK(printable("a\nb") == "a\\x0ab");
  CHECK(printable("\x1b[31mred") == "\\x1b[31mred");
  CHECK(printable("bell\x07") == "bell\\x07");
  CHECK(printable("del\x7f") == "del\\x7f");
  CHECK(printable("c1 \xc2\x9b") == "c1 \\xc2\\x9b");  // U+009B, an 8-bit CSI
  CHECK(printable("bad\xff\xfe") == "bad\\xff\\xfe");
  CHECK(printable("back\\slash") == "back\\x5cslash");  // so an escape cannot be forged
  CHECK(printable("back\\slash", false) == "back\\slash");
}
