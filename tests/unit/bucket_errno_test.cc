// The one table from nsbox's errors to the errnos a bucket mount's callers see
// (errno_for, mounts/bucket/bucket_client.h): what the failing step meant reaches the
// caller, above all the ESTALE of an object replaced since its open.
#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>

#include "mounts/bucket/bucket_client.h"
#include "mounts/bucket/object_reader.h"
#include "mounts/bucket/remote_reply.h"

using namespace nsbox;
using namespace nsbox::bucket;

namespace {

Error with_errno(ErrorCode code, int err) {
  Error e = make_error(code, "test");
  e.sys_errno = err;
  return e;
}

// A store whose object was replaced after the reader's open: every read pinned to the
// old ETag is refused, as S3 and Azure refuse an If-Match that no longer holds (412).
class ReplacedObject final : public BucketClient {
 public:
  Result<ListPage> list(const std::string&, bool, const std::string&, int) override { return ListPage{}; }
  Result<std::optional<ObjectHead>> head(const std::string&) override { return std::optional<ObjectHead>(); }
  Result<size_t> read(const std::string& key, const std::string& etag, uint64_t, char*, size_t) override {
    nsbox::http::Response reply;
    reply.status = 412;
    reply.body = "<Error><Code>PreconditionFailed</Code><Message>At least one of the pre-conditions you specified did not hold"
                 "</Message></Error>";
    return fail(remote_error_from_reply("GET " + key + " (If-Match " + etag + ")", reply, {}));
  }
  Result<std::string> upload(const std::string&, int, uint64_t) override { return std::string(); }
  Result<void> remove(const std::string&) override { return {}; }
  Result<void> copy(const std::string&, const std::string&) override { return {}; }
  Result<void> probe(const std::string&) override { return {}; }
  void stop() override {}
};

}  // namespace

TEST_CASE("a read of an object replaced since its open fails with ESTALE at the caller, not EIO") {
  ReplacedObject store;
  ObjectReader reader(store, "report.csv", "\"v1\"", 4 << 20);
  auto read = reader.read(0, 4096);
  REQUIRE_FALSE(read);
  CHECK(read.error().sys_errno == ESTALE);  // what the client produced...
  CHECK(errno_for(read.error()) == ESTALE);  // ...is what the caller gets
}

TEST_CASE("the errnos that describe the caller's call or a bound pass through the table as they are") {
  for (int err : {ENOENT, EACCES, ESTALE, ENOTEMPTY, EFBIG, EDQUOT, ENOSPC, EMFILE, ENFILE, ENAMETOOLONG}) {
    INFO(std::strerror(err));
    CHECK(errno_for(with_errno(ErrorCode::kRemote, err)) == err);
    CHECK(errno_for(with_errno(ErrorCode::kLimitExceeded, err)) == err);
    CHECK(errno_for(with_errno(ErrorCode::kSystem, err)) == err);
  }
}

TEST_CASE("an errno that describes the server's own trouble becomes EIO, not a false reason") {
  // EISDIR from a staging directory without O_TMPFILE, EINVAL from a server syscall, the
  // ECANCELED of a request cut short at shutdown: none is about the caller's file.
  for (int err : {EISDIR, EINVAL, ECANCELED, EBADF, EPIPE, ECONNRESET})
    CHECK(errno_for(with_errno(ErrorCode::kSystem, err)) == EIO);
  CHECK(errno_for(with_errno(ErrorCode::kBusy, ECANCELED)) == EIO);
  CHECK(errno_for(with_errno(ErrorCode::kRemote, EIO)) == EIO);
}

TEST_CASE("without an errno, the error's code decides, from one table") {
  CHECK(errno_for(make_error(ErrorCode::kNotFound, "x")) == ENOENT);
  CHECK(errno_for(make_error(ErrorCode::kPermissionDenied, "x")) == EACCES);
  CHECK(errno_for(make_error(ErrorCode::kLimitExceeded, "x")) == ENOSPC);
  CHECK(errno_for(make_error(ErrorCode::kInvalidArgument, "x")) == EINVAL);
  CHECK(errno_for(make_error(ErrorCode::kAlreadyExists, "x")) == EEXIST);
  CHECK(errno_for(make_error(ErrorCode::kUnsupported, "x")) == EOPNOTSUPP);
  for (auto code : {ErrorCode::kSystem, ErrorCode::kSandboxDead, ErrorCode::kTimeout, ErrorCode::kProtocol, ErrorCode::kRemote,
                    ErrorCode::kBusy, ErrorCode::kInternal})
    CHECK(errno_for(make_error(code, "x")) == EIO);
}

TEST_CASE("a remote's refusals keep their meaning from the status to the caller") {
  auto status_errno = [](long status) {
    nsbox::http::Response reply;
    reply.status = status;
    return errno_for(remote_error_from_reply("GET k", reply, {}));
  };
  CHECK(status_errno(404) == ENOENT);
  CHECK(status_errno(403) == EACCES);
  CHECK(status_errno(401) == EACCES);
  CHECK(status_errno(412) == ESTALE);
  CHECK(status_errno(500) == EIO);
  CHECK(status_errno(400) == EIO);
}
