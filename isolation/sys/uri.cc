#include "isolation/sys/uri.h"

namespace nsbox::sys {

std::string uri_encode(std::string_view s, bool keep_slash) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  // The unreserved characters of RFC 3986, ASCII only: std::isalnum would keep the bytes
  // of 'é' (0xC3 0xA9) as they are in a Latin-1 locale, where the signer must encode them.
  auto unreserved = [](unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' ||
           c == '~';
  };
  for (unsigned char c : s) {
    if (unreserved(c) || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kDigits[c >> 4];
      out += kDigits[c & 15];
    }
  }
  return out;
}

}  // namespace nsbox::sys
