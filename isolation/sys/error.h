// Error and Result: how every failure in nsbox travels upward.
//
// Modelled on crun's libcrun_error_t: the failing step records errno and a message that
// names the call and its arguments ("mount tmpfs on /home/user: Operation not permitted");
// callers add context on the way up. A stable `code` lets the CLI and the HTTP API give
// machines something to switch on.
#pragma once

#include <cerrno>
#include <expected>
#include <string>
#include <string_view>

namespace nsbox {

enum class ErrorCode {
  kInvalidArgument,   // bad input from the user: unknown size, malformed spec
  kNotFound,          // no such sandbox, file or command
  kAlreadyExists,     // duplicate name
  kUnsupported,       // the host lacks something (no cgroup delegation, old kernel)
  kSystem,            // a syscall failed; errno says why
  kSandboxDead,       // the supervisor is gone
  kTimeout,           // a bounded wait ran out
  kProtocol,          // a malformed or oversized message
  kLimitExceeded,     // a resource limit was hit (OOM, quota)
  kPermissionDenied,  // not allowed for this user
  kBusy,              // the sandbox is busy (e.g. being removed)
  kRemote,            // an object store refused or failed a request (its status says why)
  kInternal,          // a bug in nsbox
  // Said by the HTTP API (docs/api.md), never by the CLI:
  kMalformedRequest,  // not JSON, a field of the wrong type, an unknown field
  kUnauthorized,      // no bearer token, or a wrong one
  kSandboxDisabled,   // a sandbox call in a session made without a sandbox
  kUnavailable,       // the server is stopping, has too many connections, or is not ready
  kOwnerUnavailable,  // the sandbox's server (its shard) does not answer
  kMoved,             // the sandbox was drained to a snapshot: restore that
};

// Stable spelling used in JSON (`"code": "not_found"`); never rename one.
std::string_view error_code_name(ErrorCode code);
ErrorCode error_code_from_name(std::string_view name);

struct Error {
  ErrorCode code = ErrorCode::kInternal;
  int sys_errno = 0;     // 0 when not caused by a syscall
  std::string message;   // one line, names what failed
  std::string hint;      // optional: the obvious fix

  // Prepends "what: " so the message reads from the outermost step inward.
  Error&& context(std::string_view what) &&;
  Error&& with_hint(std::string_view h) &&;
};

template <class T>
using Result = std::expected<T, Error>;

// An error for a syscall that just failed: "<what>: <strerror(errno)>". Reads errno.
Error sys_error(std::string_view what);
Error sys_error(std::string_view what, int err);
Error make_error(ErrorCode code, std::string message, std::string hint = {});

inline std::unexpected<Error> fail(Error e) { return std::unexpected<Error>(std::move(e)); }

}  // namespace nsbox

// Unwraps a Result in an expression, returning its error from the enclosing function.
// (GCC statement expression: g++ is the one compiler nsbox builds with.)
#define NSBOX_TRY(expr)                                                   \
  ({                                                                      \
    auto nsbox_try_result_ = (expr);                                      \
    if (!nsbox_try_result_) return std::unexpected(std::move(nsbox_try_result_.error())); \
    std::move(*nsbox_try_result_);                                        \
  })

// For Result<void>.
#define NSBOX_CHECK(expr)                                                 \
  do {                                                                    \
    auto nsbox_check_result_ = (expr);                                    \
    if (!nsbox_check_result_) return std::unexpected(std::move(nsbox_check_result_.error())); \
  } while (0)

// NSBOX_CHECK that prefixes the error with `what` (libstdc++ 12 has no transform_error).
#define NSBOX_CHECK_CTX(expr, what)                                       \
  do {                                                                    \
    auto nsbox_check_result_ = (expr);                                    \
    if (!nsbox_check_result_)                                             \
      return std::unexpected(std::move(nsbox_check_result_.error()).context(what)); \
  } while (0)
