#include "api/http_errors.h"

#include <array>
#include <utility>

namespace nsbox::api {
namespace {

// One row per code: a new ErrorCode without a row here is answered 500 (and the unit
// test that walks every code fails).
constexpr std::array<std::pair<ErrorCode, int>, 19> kStatus = {{
    {ErrorCode::kMalformedRequest, 400},
    {ErrorCode::kSandboxDisabled, 400},
    {ErrorCode::kUnauthorized, 401},
    {ErrorCode::kPermissionDenied, 403},
    {ErrorCode::kNotFound, 404},
    {ErrorCode::kAlreadyExists, 409},
    {ErrorCode::kBusy, 409},
    {ErrorCode::kSandboxDead, 409},
    {ErrorCode::kLimitExceeded, 413},
    {ErrorCode::kInvalidArgument, 422},
    {ErrorCode::kUnsupported, 501},
    {ErrorCode::kSystem, 500},
    {ErrorCode::kInternal, 500},
    {ErrorCode::kProtocol, 502},
    {ErrorCode::kRemote, 502},
    {ErrorCode::kUnavailable, 503},
    {ErrorCode::kOwnerUnavailable, 503},
    {ErrorCode::kMoved, 410},
    {ErrorCode::kTimeout, 504},
}};

}  // namespace

int http_status(ErrorCode code) {
  for (const auto& [c, status] : kStatus)
    if (c == code) return status;
  return 500;
}

nlohmann::json error_document(const Error& e) {
  nlohmann::json err = {{"code", error_code_name(e.code)}, {"message", e.message}};
  if (!e.hint.empty()) err["hint"] = e.hint;
  return {{"error", err}};
}

}  // namespace nsbox::api
