#include "mounts/bucket/bucket_client.h"

#include <algorithm>
#include <cerrno>
#include <utility>

namespace nsbox::bucket {
namespace {

// Errnos that say something true about the caller's call, whoever set them: passed on
// as they are. Not the others: an EINVAL or EISDIR from the server's own staging file, or
// the ECANCELED of a request cut short at shutdown, would describe the server, not the
// caller's file.
constexpr int kPassedErrnos[] = {ENOENT, EACCES, ESTALE, ENOTEMPTY, EFBIG, EDQUOT, ENOSPC, EMFILE, ENFILE, ENAMETOOLONG};

// What each code means to a caller when no errno above says more. kBusy is a request cut
// short as the server stops: a file call has no "busy, come back later" a caller retries.
constexpr std::pair<ErrorCode, int> kErrnoOfCode[] = {
    {ErrorCode::kInvalidArgument, EINVAL}, {ErrorCode::kNotFound, ENOENT},     {ErrorCode::kAlreadyExists, EEXIST},
    {ErrorCode::kUnsupported, EOPNOTSUPP}, {ErrorCode::kSystem, EIO},          {ErrorCode::kSandboxDead, EIO},
    {ErrorCode::kTimeout, EIO},            {ErrorCode::kProtocol, EIO},        {ErrorCode::kLimitExceeded, ENOSPC},
    {ErrorCode::kPermissionDenied, EACCES}, {ErrorCode::kBusy, EIO},          {ErrorCode::kRemote, EIO},
    {ErrorCode::kInternal, EIO},
};

}  // namespace

int errno_for(const Error& e) {
  if (e.sys_errno != 0 && std::ranges::find(kPassedErrnos, e.sys_errno) != std::end(kPassedErrnos)) return e.sys_errno;
  for (const auto& [code, err] : kErrnoOfCode)
    if (code == e.code) return err;
  return EIO;
}

std::unique_ptr<BucketClient> make_client(const BucketMount& mount, const BucketCredentials& credentials,
                                          http::Limits limits) {
  if (mount.kind == BucketKind::kAzureBlob) return make_azure_client(mount, credentials, limits);
  return make_s3_client(mount, credentials, limits);
}

}  // namespace nsbox::bucket
