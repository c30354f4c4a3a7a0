// AWS Signature Version 4 for S3 and the stores that speak its protocol (R2, GCS's XML
// API): header authentication, the payload's SHA-256 or UNSIGNED-PAYLOAD, session tokens.
// Checked against the published test vectors and botocore (tests/unit/sigv4_test.cc).
#pragma once

#include <ctime>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "isolation/sys/uri.h"

namespace nsbox::bucket {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;
  bool anonymous() const { return access_key_id.empty(); }
};

inline constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";

// What the signature covers. `path` is already URI-encoded (encode_path); query names and
// values are raw.
struct SigV4Request {
  std::string method;
  std::string host;  // exactly as sent in Host (with :port unless the scheme's default)
  std::string path;
  std::vector<std::pair<std::string, std::string>> query;
  Headers headers;             // the other headers to sign (range, content-md5, x-amz-*)
  std::string payload_sha256;  // lowercase hex, or kUnsignedPayload
};

struct SigV4Scope {
  std::string region;
  std::string service = "s3";
};

// RFC 3986 encoding as SigV4 wants it (isolation/sys/uri.h): everything but A-Z a-z 0-9
// - _ . ~ (and '/' in paths, which S3 keeps as is; dot segments are not normalised).
using sys::uri_encode;
// The inverse, for names a listing returns encoded (S3's encoding-type=url, where '+' is a
// space too; Azure's Encoded="true", where it is not). Malformed escapes stay as they are.
std::string uri_decode(std::string_view s, bool plus_is_space);
// What both signatures do to header names and values: lowercase them; trim a value and
// fold each run of whitespace inside it to one space (SigV4's "Trimall", SharedKey's rule).
std::string lowercase(std::string_view s);
std::string fold_spaces(std::string_view value);

std::string canonical_query(const std::vector<std::pair<std::string, std::string>>& query);
std::string amz_date(std::time_t now);  // 20130524T000000Z

std::string canonical_request(const SigV4Request& request, const Headers& all_signed_headers);
std::string string_to_sign(std::string_view amz_date, const SigV4Scope& scope, std::string_view canonical);

// The headers to send besides the request's own: x-amz-date, x-amz-content-sha256,
// x-amz-security-token (with a session token) and Authorization.
Headers sigv4_sign(const SigV4Request& request, const AwsCredentials& credentials, const SigV4Scope& scope,
                   std::time_t now);

}  // namespace nsbox::bucket
