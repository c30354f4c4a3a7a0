// What S3 and Azure Blob replies have in common: when to retry, how an error reads
// (status, the remote's code and message, secrets redacted, an errno for the filesystem),
// and the two date formats they use.
#pragma once

#include <chrono>
#include <ctime>
#include <string>

#include "isolation/sys/error.h"
#include "mounts/bucket/http_client.h"
#include "mounts/bucket/mount_spec.h"

namespace nsbox::bucket {

// Three attempts, 0.2 s then 0.8 s apart: with HttpLimits' bounds, a remote that stops
// answering fails a request in under 40 s, one that refuses connections in about 1 s.
inline constexpr int kAttempts = 3;
std::chrono::milliseconds backoff(int attempt);
bool retryable(long status);  // 5xx and 429 (throttling)

// kRemote with sys_errno set: ENOENT, EACCES, ESTALE or EIO.
Error remote_error(int err, std::string message);
// "what: HTTP 403 AccessDenied: Access Denied", the errno from the status.
Error remote_error_from_reply(const std::string& what, const HttpResponse& response, const BucketCredentials& secrets);

std::time_t parse_iso8601(const std::string& text);    // 2026-11-30T01:02:03.000Z; 0 when malformed
std::time_t parse_http_date(const std::string& text);  // Mon, 30 Nov 2026 01:02:03 GMT; 0 when malformed

}  // namespace nsbox::bucket
