#include "runtime/client/sandbox_fs_answers.h"

#include <cstring>
#include <string>
#include <vector>

namespace nsbox::fs_answers {

sys::ChildAnswer pack(Result<void>&&) { return {}; }
sys::ChildAnswer pack(uint64_t n) { return {std::to_string(n), {}}; }
sys::ChildAnswer pack(UniqueFd fd) { return {"", std::move(fd)}; }
sys::ChildAnswer pack(const struct stat& st) { return {std::string(reinterpret_cast<const char*>(&st), sizeof st), {}}; }
// NUL-separated fields (a name never holds a NUL; it may hold anything else, invalid
// UTF-8 included): the cursor, then six per entry.
sys::ChildAnswer pack(const files::DirPage& page) {
  std::string out = page.next_cursor;
  for (const auto& e : page.entries)
    for (const std::string& field : {e.name, e.type, std::to_string(e.size), std::to_string(e.allocated), std::to_string(e.mode),
                                     std::to_string(e.mtime)})
      out += '\0' + field;
  return {std::move(out), {}};
}

template <>
Result<void> unpack(sys::ChildAnswer&&) { return {}; }
template <>
Result<uint64_t> unpack(sys::ChildAnswer&& a) { return std::stoull(a.bytes); }
template <>
Result<UniqueFd> unpack(sys::ChildAnswer&& a) {
  if (!a.fd) return fail(make_error(ErrorCode::kInternal, "a child's answer came without its fd"));
  return std::move(a.fd);
}
template <>
Result<struct stat> unpack(sys::ChildAnswer&& a) {
  struct stat st{};
  if (a.bytes.size() != sizeof st) return fail(make_error(ErrorCode::kInternal, "a child's stat answer is malformed"));
  std::memcpy(&st, a.bytes.data(), sizeof st);
  return st;
}
template <>
Result<files::DirPage> unpack(sys::ChildAnswer&& a) {
  std::vector<std::string> fields;
  for (size_t at = 0;;) {
    size_t end = a.bytes.find('\0', at);
    fields.push_back(a.bytes.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  if ((fields.size() - 1) % 6 != 0) return fail(make_error(ErrorCode::kInternal, "a child's listing is malformed"));
  files::DirPage page;
  page.next_cursor = fields[0];
  for (size_t i = 1; i + 5 < fields.size(); i += 6)
    page.entries.push_back({fields[i], fields[i + 1], std::stoull(fields[i + 2]), std::stoull(fields[i + 3]),
                            static_cast<uint32_t>(std::stoul(fields[i + 4])), std::stoll(fields[i + 5])});
  return page;
}

}  // namespace nsbox::fs_answers
