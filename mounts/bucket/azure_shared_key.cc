#include "mounts/bucket/azure_shared_key.h"

#include <strings.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>

#include "mounts/bucket/crypto.h"

namespace nsbox::bucket {
namespace {

const std::string* find_header(const Headers& headers, std::string_view name) {
  for (const auto& [n, v] : headers)
    if (n.size() == name.size() && strncasecmp(n.data(), name.data(), name.size()) == 0) return &v;
  return nullptr;
}

std::string standard_value(const Headers& headers, std::string_view name) {
  const std::string* value = find_header(headers, name);
  if (!value) return {};
  if (name == "content-length" && *value == "0") return {};  // since version 2015-02-21
  if (name == "date" && find_header(headers, "x-ms-date")) return {};
  return *value;
}

}  // namespace

std::string azure_date(std::time_t now) {
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  // Not strftime's %a/%b: they follow the locale, and the service wants English names.
  static constexpr const char* kDays[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%s, %02d %s %04d %02d:%02d:%02d GMT", kDays[tm.tm_wday], tm.tm_mday,
                kMonths[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
  return buffer;
}

std::string canonicalized_headers(const Headers& headers) {
  std::map<std::string, std::string> by_name;  // sorted by the lowercase name
  for (const auto& [name, value] : headers) {
    std::string lower = lowercase(fold_spaces(name));
    if (!lower.starts_with("x-ms-")) continue;
    auto [it, inserted] = by_name.try_emplace(lower, fold_spaces(value));
    if (!inserted) it->second += "," + fold_spaces(value);
  }
  std::string out;
  for (const auto& [name, value] : by_name) out += name + ":" + value + "\n";
  return out;
}

std::string canonicalized_resource(std::string_view account, std::string_view path,
                                   const std::vector<std::pair<std::string, std::string>>& query) {
  std::string out = "/" + std::string(account) + (path.empty() ? "/" : std::string(path));
  std::map<std::string, std::vector<std::string>> by_name;
  for (const auto& [name, value] : query) by_name[lowercase(name)].push_back(value);
  for (auto& [name, values] : by_name) {
    std::sort(values.begin(), values.end());
    out += "\n" + name + ":";
    for (size_t i = 0; i < values.size(); ++i) out += (i ? "," : "") + values[i];
  }
  return out;
}

std::string shared_key_string_to_sign(const SharedKeyRequest& request) {
  static constexpr std::string_view kStandard[] = {
      "content-encoding", "content-language",  "content-length", "content-md5",         "content-type", "date",
      "if-modified-since", "if-match",         "if-none-match",  "if-unmodified-since", "range"};
  std::string out = request.method + "\n";
  for (std::string_view name : kStandard) out += standard_value(request.headers, name) + "\n";
  out += canonicalized_headers(request.headers);
  out += canonicalized_resource(request.account, request.path, request.query);
  return out;
}

std::string shared_key_authorization(std::string_view account, std::string_view key, std::string_view string_to_sign) {
  return "SharedKey " + std::string(account) + ":" + base64_encode(hmac_sha256(key, string_to_sign));
}

Headers shared_key_sign(const SharedKeyRequest& request, std::string_view key, std::time_t now) {
  Headers added;
  if (!find_header(request.headers, "x-ms-date")) added.emplace_back("x-ms-date", azure_date(now));
  if (!find_header(request.headers, "x-ms-version")) added.emplace_back("x-ms-version", std::string(kAzureApiVersion));
  SharedKeyRequest complete = request;
  complete.headers.insert(complete.headers.end(), added.begin(), added.end());
  added.emplace_back("authorization",
                     shared_key_authorization(request.account, key, shared_key_string_to_sign(complete)));
  return added;
}

}  // namespace nsbox::bucket
