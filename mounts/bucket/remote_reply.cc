#include "mounts/bucket/remote_reply.h"

#include <cerrno>

#include "mounts/bucket/xml_tree.h"

namespace nsbox::bucket {

std::chrono::milliseconds backoff(int attempt) { return std::chrono::milliseconds(200 << (2 * (attempt - 1))); }

bool retryable(long status) { return status >= 500 || status == 429; }

Error remote_error(int err, std::string message) {
  Error e = make_error(ErrorCode::kRemote, std::move(message));
  e.sys_errno = err;
  if (err == ENOENT) e.code = ErrorCode::kNotFound;
  if (err == EACCES) e.code = ErrorCode::kPermissionDenied;
  return e;
}

Error remote_error_from_reply(const std::string& what, const HttpResponse& response, const BucketCredentials& secrets) {
  int err = EIO;
  if (response.status == 404) err = ENOENT;
  if (response.status == 401 || response.status == 403) err = EACCES;
  if (response.status == 412) err = ESTALE;
  std::string text = what + ": HTTP " + std::to_string(response.status);
  if (auto doc = parse_xml(response.body); doc && doc->name == "Error") {
    std::string code = doc->child_text("Code");
    std::string message = doc->child_text("Message");
    if (auto nl = message.find('\n'); nl != std::string::npos) message.resize(nl);  // Azure adds RequestId lines
    if (!code.empty()) text += " " + code;
    if (!message.empty()) text += ": " + message;
  } else if (std::string code = response.header("x-ms-error-code"); !code.empty()) {
    text += " " + code;  // Azure's HEAD errors have no body
  }
  return remote_error(err, redact(std::move(text), secrets));
}

std::time_t parse_iso8601(const std::string& text) {
  std::tm tm{};
  if (!::strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm)) return 0;
  return ::timegm(&tm);
}

std::time_t parse_http_date(const std::string& text) {
  std::tm tm{};
  if (!::strptime(text.c_str(), "%a, %d %b %Y %H:%M:%S", &tm)) return 0;
  return ::timegm(&tm);
}

}  // namespace nsbox::bucket
