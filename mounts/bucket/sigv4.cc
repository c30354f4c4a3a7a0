#include "mounts/bucket/sigv4.h"

#include <algorithm>

#include "mounts/bucket/crypto.h"

namespace nsbox::bucket {
namespace {

Headers canonical_headers(const Headers& headers) {
  Headers out;
  for (const auto& [name, value] : headers) out.emplace_back(lowercase(name), fold_spaces(value));
  std::sort(out.begin(), out.end());
  return out;
}

std::string signed_header_names(const Headers& canonical) {
  std::string names;
  for (const auto& [name, value] : canonical) names += (names.empty() ? "" : ";") + name;
  return names;
}

}  // namespace

// ASCII only, whatever the locale: std::tolower in a Turkish locale makes 'I' a dotless
// 'ı' (0xFD in ISO-8859-9), and a header name the server would not match.
std::string lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::string fold_spaces(std::string_view value) {
  std::string out;
  bool in_space = false;
  for (char c : value) {
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      in_space = true;
      continue;
    }
    if (in_space && !out.empty()) out += ' ';
    in_space = false;
    out += c;
  }
  return out;
}


std::string uri_decode(std::string_view s, bool plus_is_space) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else {
      out += (plus_is_space && s[i] == '+') ? ' ' : s[i];
    }
  }
  return out;
}

std::string canonical_query(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> encoded;
  for (const auto& [name, value] : query) encoded.emplace_back(uri_encode(name), uri_encode(value));
  std::sort(encoded.begin(), encoded.end());
  std::string out;
  for (const auto& [name, value] : encoded) out += (out.empty() ? "" : "&") + name + "=" + value;
  return out;
}

std::string amz_date(std::time_t now) {
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char buf[20];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string canonical_request(const SigV4Request& request, const Headers& all_signed_headers) {
  Headers canonical = canonical_headers(all_signed_headers);
  std::string text = request.method + "\n" + request.path + "\n" + canonical_query(request.query) + "\n";
  for (const auto& [name, value] : canonical) text += name + ":" + value + "\n";
  text += "\n" + signed_header_names(canonical) + "\n" + request.payload_sha256;
  return text;
}

std::string string_to_sign(std::string_view date, const SigV4Scope& scope, std::string_view canonical) {
  std::string day(date.substr(0, 8));
  return "AWS4-HMAC-SHA256\n" + std::string(date) + "\n" + day + "/" + scope.region + "/" + scope.service +
         "/aws4_request\n" + to_hex(sha256_raw(canonical));
}

Headers sigv4_sign(const SigV4Request& request, const AwsCredentials& credentials, const SigV4Scope& scope,
                   std::time_t now) {
  if (credentials.anonymous()) return {};
  std::string date = amz_date(now);
  Headers added = {{"x-amz-date", date}, {"x-amz-content-sha256", request.payload_sha256}};
  if (!credentials.session_token.empty()) added.emplace_back("x-amz-security-token", credentials.session_token);

  Headers to_sign = request.headers;
  to_sign.emplace_back("host", request.host);
  to_sign.insert(to_sign.end(), added.begin(), added.end());
  std::string canonical = canonical_request(request, to_sign);

  std::string day = date.substr(0, 8);
  std::string key = hmac_sha256("AWS4" + credentials.secret_access_key, day);
  key = hmac_sha256(key, scope.region);
  key = hmac_sha256(key, scope.service);
  key = hmac_sha256(key, "aws4_request");
  std::string signature = to_hex(hmac_sha256(key, string_to_sign(date, scope, canonical)));

  added.emplace_back("Authorization", "AWS4-HMAC-SHA256 Credential=" + credentials.access_key_id + "/" + day + "/" +
                                          scope.region + "/" + scope.service +
                                          "/aws4_request, SignedHeaders=" + signed_header_names(canonical_headers(to_sign)) +
                                          ", Signature=" + signature);
  return added;
}

}  // namespace nsbox::bucket
