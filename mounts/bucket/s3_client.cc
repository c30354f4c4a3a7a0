// The S3 protocol, as AWS, R2 and GCS's XML API speak it (docs/semantics.md, "Bucket
// mounts"): ListObjectsV2 with a delimiter, ranged GETs pinned by If-Match, single PUT or
// equal-size multipart uploads, CopyObject, DeleteObject. Requests are signed with SigV4
// unless the mount is anonymous.
#include <cerrno>

#include "mounts/bucket/bucket_client.h"
#include "mounts/bucket/crypto.h"
#include "mounts/bucket/part_upload.h"
#include "mounts/bucket/remote_reply.h"
#include "mounts/bucket/xml_tree.h"

namespace nsbox::bucket {
namespace {

constexpr uint64_t kMultipartThreshold = 16ull << 20;
constexpr uint64_t kMinPartSize = 8ull << 20;
constexpr uint64_t kMaxParts = 10000;
constexpr int kParallelParts = 4;

class S3Client final : public BucketClient {
 public:
  S3Client(const BucketMount& mount, const BucketCredentials& credentials, http::Limits limits)
      : mount_(mount), credentials_{credentials.access_key_id, credentials.secret_access_key, credentials.session_token},
        secrets_(credentials), http_(store_client_options(limits)) {
    std::string url = mount.endpoint_url;
    auto scheme_end = url.find("://");
    scheme_ = scheme_end == std::string::npos ? "https" : url.substr(0, scheme_end);
    std::string rest = scheme_end == std::string::npos ? url : url.substr(scheme_end + 3);
    host_ = rest.substr(0, rest.find('/'));
    if (!mount.path_style) host_ = mount.bucket + "." + host_;
    base_path_ = mount.path_style ? "/" + uri_encode(mount.bucket) : "";
  }

  Result<ListPage> list(const std::string& prefix, bool delimited, const std::string& token, int max_keys) override {
    Call call;
    // encoding-type=url: a key XML cannot carry (a control character) comes back encoded.
    // Stores that ignore it (s3rver) say so by leaving EncodingType out.
    call.query = {{"list-type", "2"}, {"prefix", prefix}, {"max-keys", std::to_string(max_keys)}, {"encoding-type", "url"}};
    if (delimited) call.query.emplace_back("delimiter", "/");
    if (!token.empty()) call.query.emplace_back("continuation-token", token);
    auto response = NSBOX_TRY(send(call, "list " + where(prefix)));
    auto doc = NSBOX_TRY(parse_xml(response.body));
    bool encoded = doc.child_text("EncodingType") == "url";
    auto name_of = [&](const XmlElement* e, const char* field) {
      std::string text = e->child_text(field);
      return encoded ? uri_decode(text, true) : text;
    };
    ListPage page;
    for (const auto* c : doc.all("Contents"))
      add_listed(page, prefix, name_of(c, "Key"), false,
                 {{}, false, std::strtoull(c->child_text("Size").c_str(), nullptr, 10),
                  parse_iso8601(c->child_text("LastModified")), c->child_text("ETag")});
    for (const auto* p : doc.all("CommonPrefixes")) add_listed(page, prefix, name_of(p, "Prefix"), true, {});
    if (doc.child_text("IsTruncated") == "true") page.next_token = doc.child_text("NextContinuationToken");
    return page;
  }

  Result<std::optional<ObjectHead>> head(const std::string& key) override {
    return object_head(send(head_call(key), "head " + where(key)));
  }

  Result<size_t> read(const std::string& key, const std::string& etag, uint64_t offset, char* buffer,
                      size_t length) override {
    if (length == 0) return size_t{0};
    std::string what = "read " + where(key);
    auto call = ranged_get_call(key, etag, offset, buffer, length, "Range");
    return ranged_read_result(send(call, what, {416}), offset, what, "Range");
  }

  Result<std::string> upload(const std::string& key, int fd, uint64_t size) override {
    if (size <= kMultipartThreshold) {
      Call call;
      call.method = "PUT";
      call.key = key;
      call.body_fd = fd;
      call.body_length = size;
      auto response = NSBOX_TRY(send(call, "upload " + where(key)));
      return response.header("etag");
    }
    return upload_in_parts(key, fd, size);
  }

  Result<void> remove(const std::string& key) override {
    Call call;
    call.method = "DELETE";
    call.key = key;
    auto response = send(call, "delete " + where(key));
    if (!response && response.error().sys_errno != ENOENT) return fail(std::move(response.error()));
    return {};
  }

  Result<void> copy(const std::string& from, const std::string& to) override {
    Call call;
    call.method = "PUT";
    call.key = to;
    call.headers = {{"x-amz-copy-source", base_path_for_copy() + uri_encode(from, true)}};
    auto response = NSBOX_TRY(send(call, "copy " + where(from) + " to " + to));
    NSBOX_CHECK(error_in_body(response, "copy " + where(from) + " to " + to));  // a 200 may carry an <Error>
    return {};
  }

  Result<void> probe(const std::string& prefix) override {
    NSBOX_CHECK(list(prefix, true, "", 1));
    return {};
  }

  void stop() override { http_.stop(); }

 private:
  std::string where(const std::string& key) const { return std::string(kind_name(mount_.kind)) + "://" + mount_.bucket + "/" + key; }
  std::string base_path_for_copy() const { return "/" + uri_encode(mount_.bucket) + "/"; }

  Result<std::string> upload_in_parts(const std::string& key, int fd, uint64_t size) {
    // Equal parts (R2 requires it), at least 8 MiB, at most 10,000 of them.
    PartPlan plan = plan_parts(size, kMinPartSize, kMaxParts);
    std::string what = "upload " + where(key);

    Call start;
    start.method = "POST";
    start.key = key;
    start.query = {{"uploads", ""}};
    auto started = NSBOX_TRY(send(start, what + " (start multipart)"));
    std::string upload_id = NSBOX_TRY(parse_xml(started.body)).child_text("UploadId");
    if (upload_id.empty()) return fail(remote_error(EIO, what + ": the remote gave no UploadId"));

    std::vector<std::string> etags(plan.count);
    auto put_part = [&](uint64_t i, uint64_t offset, uint64_t length) -> Result<void> {
      Call put;
      put.method = "PUT";
      put.key = key;
      put.query = {{"partNumber", std::to_string(i + 1)}, {"uploadId", upload_id}};
      put.body_fd = fd;
      put.body_offset = offset;
      put.body_length = length;
      std::string part = " (part " + std::to_string(i + 1) + " of " + std::to_string(plan.count) + ")";
      etags[i] = NSBOX_TRY(send(put, what + part)).header("etag");
      return {};
    };
    auto sent = upload_parts(plan, size, kParallelParts, put_part);
    if (!sent) return fail(aborted(key, upload_id, std::move(sent.error())));

    Call complete;
    complete.method = "POST";
    complete.key = key;
    complete.query = {{"uploadId", upload_id}};
    complete.body = "<CompleteMultipartUpload>";
    for (uint64_t i = 0; i < plan.count; ++i)
      complete.body += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" + etags[i] + "</ETag></Part>";
    complete.body += "</CompleteMultipartUpload>";
    auto done = send(complete, what + " (complete multipart)");
    Result<void> checked = done ? error_in_body(*done, what + " (complete multipart)") : fail(std::move(done.error()));
    if (!checked) {
      // A retried Complete whose first attempt went through is told NoSuchUpload: an object
      // of this size written in the last minutes is that upload, and that is success.
      if (checked.error().sys_errno == ENOENT)
        if (auto head = this->head(key);
            head && *head && (*head)->size == size && std::time(nullptr) - (*head)->mtime < 600)
          return (*head)->etag;
      return fail(aborted(key, upload_id, std::move(checked.error())));
    }
    auto doc = parse_xml(done->body);
    return doc ? doc->child_text("ETag") : std::string();
  }

  // `why` the multipart upload failed, after aborting it; a failed abort is said too.
  Error aborted(const std::string& key, const std::string& upload_id, Error why) {
    Call abort;
    abort.method = "DELETE";
    abort.key = key;
    abort.query = {{"uploadId", upload_id}};
    abort.cleanup = true;  // above all when the server is stopping: the parts must not stay
    if (auto done = send(abort, "abort it"); !done)
      why.message += "; " + done.error().message + " (its parts stay until a lifecycle rule of the bucket removes them)";
    return why;
  }

  // "HTTP 200 with an <Error> body": CompleteMultipartUpload and CopyObject fail that way.
  Result<void> error_in_body(const http::Response& response, const std::string& what) {
    auto doc = parse_xml(response.body);
    if (doc && doc->name == "Error") return fail(remote_error_from_reply(what, response, secrets_));
    return {};
  }

  // Signs each attempt with SigV4 (a fresh date) and sends with send_with_retries.
  Result<http::Response> send(const Call& call, const std::string& what, std::initializer_list<long> accepted = {}) {
    std::string path = base_path_ + "/" + uri_encode(call.key, true);
    std::string query = canonical_query(call.query);
    http::Request request = http_request_for(call, scheme_ + "://" + host_ + path + (query.empty() ? "" : "?" + query));
    SigV4Request to_sign{call.method, host_, path, call.query, call.headers,
                         call.body_fd >= 0 ? std::string(kUnsignedPayload) : to_hex(sha256_raw(call.body))};
    auto signed_headers = [&] {
      Headers headers = call.headers;
      Headers auth = sigv4_sign(to_sign, credentials_, {mount_.region, "s3"}, std::time(nullptr));
      headers.insert(headers.end(), auth.begin(), auth.end());
      return headers;
    };
    return send_with_retries(http_, std::move(request), signed_headers, what, accepted, secrets_);
  }

  BucketMount mount_;
  AwsCredentials credentials_;
  BucketCredentials secrets_;
  http::Client http_;
  std::string scheme_, host_, base_path_;
};

}  // namespace

std::unique_ptr<BucketClient> make_s3_client(const BucketMount& mount, const BucketCredentials& credentials,
                                             http::Limits limits) {
  return std::make_unique<S3Client>(mount, credentials, limits);
}

}  // namespace nsbox::bucket
