// The byte carriers of the protocol: a command's or a cell's output goes into a frame as
// text ("data", when it is UTF-8) or base64 ("data_b64"), and comes out with get_bytes;
// base64_decode also reads what a peer sends. The input is the bytes.
//
// Checks: is_valid_utf8 accepts exactly UTF-8 by Unicode's rules (no overlong forms, no
// surrogates, nothing past U+10FFFF, which JSON would rewrite); every input's bytes come
// out of a message the same, also after the message is encoded and parsed as a frame is;
// base64 decodes what it encodes and never throws on anything. (Once accepted:
// corpus/frame_bytes/overlong.)
#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/protocol/frame.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

// UTF-8 as RFC 3629 defines it: shortest forms only, no surrogates, at most U+10FFFF.
bool strict_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) { ++i; continue; }
    size_t n;
    uint32_t cp, min;
    if ((c & 0xE0) == 0xC0) n = 2, cp = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) n = 3, cp = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0) n = 4, cp = c & 0x07, min = 0x10000;
    else return false;
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nsbox::protocol;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);

  bool strict = strict_utf8(bytes);
  FUZZ_CHECK(is_valid_utf8(bytes) == strict);

  std::string encoded = base64_encode(bytes);
  FUZZ_CHECK(encoded.size() == (size + 2) / 3 * 4);
  auto decoded = base64_decode(encoded);
  FUZZ_CHECK(decoded && *decoded == bytes);
  (void)base64_decode(bytes);  // whatever a peer sends as data_b64

  Json message = Json::object();
  put_bytes(message, bytes);
  FUZZ_CHECK(get_bytes(message) == bytes);
  if (!is_valid_utf8(bytes)) FUZZ_CHECK(message.contains("data_b64") && !message.contains("data"));
  std::string frame = encode(message);
  Json parsed = nsbox::fuzz::parse_json(std::string_view(frame).substr(4));
  FUZZ_CHECK(parsed.is_object());
  FUZZ_CHECK(get_bytes(parsed) == bytes);

  // A peer's message with the input as "data_b64" or as "data": never throws.
  Json peer = {{"data_b64", std::string(bytes)}};
  (void)get_bytes(peer);
  return 0;
}
