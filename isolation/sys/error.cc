#include "isolation/sys/error.h"

#include <array>
#include <cstring>
#include <utility>

namespace nsbox {
namespace {

constexpr std::array<std::pair<ErrorCode, std::string_view>, 19> kNames = {{
    {ErrorCode::kInvalidArgument, "invalid_argument"},
    {ErrorCode::kNotFound, "not_found"},
    {ErrorCode::kAlreadyExists, "already_exists"},
    {ErrorCode::kUnsupported, "unsupported"},
    {ErrorCode::kSystem, "system"},
    {ErrorCode::kSandboxDead, "sandbox_dead"},
    {ErrorCode::kTimeout, "timeout"},
    {ErrorCode::kProtocol, "protocol"},
    {ErrorCode::kLimitExceeded, "limit_exceeded"},
    {ErrorCode::kPermissionDenied, "permission_denied"},
    {ErrorCode::kBusy, "busy"},
    {ErrorCode::kRemote, "remote"},
    {ErrorCode::kInternal, "internal"},
    {ErrorCode::kMalformedRequest, "malformed_request"},
    {ErrorCode::kUnauthorized, "unauthorized"},
    {ErrorCode::kSandboxDisabled, "sandbox_disabled"},
    {ErrorCode::kUnavailable, "unavailable"},
    {ErrorCode::kOwnerUnavailable, "owner_unavailable"},
    {ErrorCode::kMoved, "moved"},
}};

}  // namespace

std::string_view error_code_name(ErrorCode code) {
  for (const auto& [c, name] : kNames)
    if (c == code) return name;
  return "internal";
}

ErrorCode error_code_from_name(std::string_view name) {
  for (const auto& [c, n] : kNames)
    if (n == name) return c;
  return ErrorCode::kInternal;
}

Error&& Error::context(std::string_view what) && {
  message = std::string(what) + ": " + message;
  return std::move(*this);
}

Error&& Error::with_hint(std::string_view h) && {
  hint = h;
  return std::move(*this);
}

Error sys_error(std::string_view what) { return sys_error(what, errno); }

Error sys_error(std::string_view what, int err) {
  ErrorCode code = ErrorCode::kSystem;
  if (err == ENOENT) code = ErrorCode::kNotFound;
  if (err == EPERM || err == EACCES) code = ErrorCode::kPermissionDenied;
  return Error{code, err, std::string(what) + ": " + std::strerror(err), {}};
}

Error make_error(ErrorCode code, std::string message, std::string hint) {
  return Error{code, 0, std::move(message), std::move(hint)};
}

}  // namespace nsbox
