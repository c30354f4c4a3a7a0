// Azure Storage's SharedKey authorization for the Blob service: the string to sign, its
// canonicalized x-ms-* headers and resource, and the Authorization header. Pure functions,
// so tests/unit/azure_shared_key_test.cc checks them against independently computed
// vectors; azure_client.cc signs every attempt with them.
#pragma once

#include <ctime>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mounts/bucket/sigv4.h"  // Headers

namespace nsbox::bucket {

// The REST version sent as x-ms-version on every request: new enough for 4000 MiB blocks
// and 5000 MiB Put Blob, old enough for every Azurite 3.x since 3.18.
inline constexpr std::string_view kAzureApiVersion = "2021-08-06";

// What the signature covers.
struct SharedKeyRequest {
  std::string method;
  std::string account;  // the account whose key signs
  // The URL path exactly as sent (already percent-encoded), from its first '/'. Emulator
  // URLs carry the account in the path, so http://127.0.0.1:10000/devstoreaccount1/c/b has
  // the path /devstoreaccount1/c/b and the resource /devstoreaccount1/devstoreaccount1/c/b.
  std::string path;
  std::vector<std::pair<std::string, std::string>> query;  // names and values not encoded
  // Headers sent (any case): the standard ones the string to sign names (content-length,
  // content-md5, content-type, if-match, range, ...) and every x-ms-* one, x-ms-date and
  // x-ms-version included. Others are ignored.
  Headers headers;
};

std::string azure_date(std::time_t now);  // RFC 1123: Sun, 06 Nov 1994 08:49:37 GMT

// `name:value\n` for each x-ms-* header: names lowercased, sorted; values trimmed, runs of
// whitespace folded to one space; repeated names comma-joined.
std::string canonicalized_headers(const Headers& headers);
// `/account/path`, then `\nname:value` for each query parameter: names lowercased and
// sorted, values of a repeated name sorted and comma-joined.
std::string canonicalized_resource(std::string_view account, std::string_view path,
                                   const std::vector<std::pair<std::string, std::string>>& query);
// The verb, the eleven standard headers (Content-Length empty when 0, Date empty: x-ms-date
// is sent instead), the canonicalized headers and resource.
std::string shared_key_string_to_sign(const SharedKeyRequest& request);
// `SharedKey account:base64(HMAC-SHA256(key, string_to_sign))`; `key` is the decoded
// account key (raw bytes), not its base64.
std::string shared_key_authorization(std::string_view account, std::string_view key, std::string_view string_to_sign);

// What to send besides the request's own headers: x-ms-date and x-ms-version (unless the
// request has them) and Authorization.
Headers shared_key_sign(const SharedKeyRequest& request, std::string_view key, std::time_t now);

}  // namespace nsbox::bucket
