#include "runtime/core/port_number.h"

#include <algorithm>
#include <string>

namespace nsbox {

std::optional<uint16_t> parse_port(std::string_view text, unsigned least) {
  if (text.empty() || text.size() > 5 || !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  unsigned long v = std::stoul(std::string(text));
  if (v < least || v > 65535) return std::nullopt;
  return static_cast<uint16_t>(v);
}

Result<uint16_t> port_field(const protocol::Json& doc, const char* key, unsigned least, std::optional<uint16_t> fallback,
                            ErrorCode code) {
  auto it = doc.find(key);
  if (it == doc.end() && fallback) return *fallback;
  if (it == doc.end() || !it->is_number_integer() || it->get<int64_t>() < static_cast<int64_t>(least) || it->get<int64_t>() > 65535)
    return fail(make_error(code, std::string("\"") + key + "\" must be a port number from " + std::to_string(least) + " to 65535"));
  return static_cast<uint16_t>(it->get<int64_t>());
}

}  // namespace nsbox
