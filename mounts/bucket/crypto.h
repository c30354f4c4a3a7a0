// The few primitives request signing needs (OpenSSL's libcrypto underneath).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace nsbox::bucket {

std::string hmac_sha256(std::string_view key, std::string_view data);  // raw 32 bytes
std::string sha256_raw(std::string_view data);                         // raw 32 bytes
std::string to_hex(std::string_view bytes);
std::string base64_encode(std::string_view bytes);
std::optional<std::string> base64_decode(std::string_view text);  // nullopt when malformed

}  // namespace nsbox::bucket
