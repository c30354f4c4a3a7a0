// The Azure Blob protocol (docs/semantics.md, "Bucket mounts"): List Blobs with a
// delimiter, ranged GETs pinned by If-Match, Put Blob or equal-size Put Block + Put Block
// List, Copy Blob (polled until done), Delete Blob. Requests are signed with SharedKey, or
// carry a SAS token in their query, or neither for a public container.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <random>
#include <thread>

#include "mounts/bucket/azure_shared_key.h"
#include "mounts/bucket/bucket_client.h"
#include "mounts/bucket/crypto.h"
#include "mounts/bucket/part_upload.h"
#include "mounts/bucket/remote_reply.h"
#include "mounts/bucket/xml_tree.h"

namespace nsbox::bucket {
namespace {

constexpr uint64_t kBlockThreshold = 16ull << 20;
constexpr uint64_t kMinBlockSize = 8ull << 20;
constexpr uint64_t kMaxBlocks = 50000;
constexpr int kParallelBlocks = 4;
constexpr int kMaxResults = 5000;
// A copy inside one account is done when Copy Blob answers (Azurite, and Azure for most
// blobs); one still pending after this long is aborted rather than left to finish later.
constexpr auto kCopyWait = std::chrono::seconds(120);

// Azure lists ETags bare (0x8D...) and sends them quoted in headers: quoted everywhere, so
// an entry's etag and a head's compare equal.
std::string quoted(std::string etag) {
  if (etag.empty() || etag.front() == '"') return etag;
  return "\"" + etag + "\"";
}

// IDs of one upload's blocks: the same length always (Azure refuses a blob whose
// uncommitted blocks differ in length), with a random tag so that two writers of one blob
// never commit each other's blocks.
std::string block_id(uint64_t tag, uint64_t index) {
  char raw[48];
  std::snprintf(raw, sizeof raw, "%016" PRIx64 "-%07" PRIu64, tag, index);
  return base64_encode(raw);  // 24 bytes: 32 characters, no padding
}

class AzureClient final : public BucketClient {
 public:
  AzureClient(const BucketMount& mount, const BucketCredentials& credentials, http::Limits limits)
      // With both a key and a SAS, the key signs and the SAS stays out of the URLs.
      : mount_(mount), sas_(credentials.azure_key.empty() ? credentials.azure_sas : ""), secrets_(credentials),
        http_(store_client_options(limits)) {
    std::string url = mount.endpoint_url;
    if (url.empty()) url = "https://" + mount.account + ".blob.core.windows.net";
    auto scheme_end = url.find("://");
    scheme_ = scheme_end == std::string::npos ? "https" : url.substr(0, scheme_end);
    std::string rest = scheme_end == std::string::npos ? url : url.substr(scheme_end + 3);
    auto slash = rest.find('/');
    host_ = rest.substr(0, slash);
    if (slash != std::string::npos) base_path_ = rest.substr(slash);
    while (!base_path_.empty() && base_path_.back() == '/') base_path_.pop_back();
    account_ = mount.account;
    // Without one named: the emulator's path (/devstoreaccount1) or the host's first label.
    if (account_.empty() && !base_path_.empty()) account_ = base_path_.substr(1, base_path_.find('/', 1) - 1);
    if (account_.empty()) account_ = host_.substr(0, host_.find('.'));
    if (!credentials.azure_key.empty()) {
      auto key = base64_decode(credentials.azure_key);
      key_ = key.value_or("");
      key_malformed_ = !key || key->empty();
    }
  }

  Result<ListPage> list(const std::string& prefix, bool delimited, const std::string& token, int max_keys) override {
    Call call;
    call.query = {{"restype", "container"}, {"comp", "list"},
                  {"maxresults", std::to_string(std::clamp(max_keys, 1, kMaxResults))}};
    if (!prefix.empty()) call.query.emplace_back("prefix", prefix);
    if (delimited) call.query.emplace_back("delimiter", "/");
    if (!token.empty()) call.query.emplace_back("marker", token);
    auto response = NSBOX_TRY(send(call, "list " + where(prefix)));
    auto doc = NSBOX_TRY(parse_xml(response.body));
    ListPage page;
    // A name XML cannot carry comes as <Name Encoded="true">, percent-encoded.
    auto name_of = [](const XmlElement* item) {
      const XmlElement* name = item->child("Name");
      if (!name) return std::string();
      return name->attribute("Encoded") == "true" ? uri_decode(name->text, false) : name->text;
    };
    if (const XmlElement* blobs = doc.child("Blobs")) {
      for (const auto* b : blobs->all("Blob")) {
        ObjectEntry e;
        if (const XmlElement* props = b->child("Properties")) {
          e.size = std::strtoull(props->child_text("Content-Length").c_str(), nullptr, 10);
          e.mtime = http::parse_date(props->child_text("Last-Modified"));
          e.etag = quoted(props->child_text("Etag"));
        }
        add_listed(page, prefix, name_of(b), false, std::move(e));
      }
      for (const auto* p : blobs->all("BlobPrefix")) add_listed(page, prefix, name_of(p), true, {});
    }
    page.next_token = doc.child_text("NextMarker");
    return page;
  }

  Result<std::optional<ObjectHead>> head(const std::string& key) override {
    return object_head(send(head_call(key), "head " + where(key)));
  }

  Result<size_t> read(const std::string& key, const std::string& etag, uint64_t offset, char* buffer,
                      size_t length) override {
    if (length == 0) return size_t{0};
    std::string what = "read " + where(key);
    auto call = ranged_get_call(key, etag, offset, buffer, length, "x-ms-range");
    return ranged_read_result(send(call, what, {416}), offset, what, "x-ms-range");
  }

  Result<std::string> upload(const std::string& key, int fd, uint64_t size) override {
    if (size <= kBlockThreshold) {
      Call call;
      call.method = "PUT";
      call.key = key;
      call.headers = {{"x-ms-blob-type", "BlockBlob"}};
      call.body_fd = fd;
      call.body_length = size;
      auto response = NSBOX_TRY(send(call, "upload " + where(key)));
      return response.header("etag");
    }
    return upload_in_blocks(key, fd, size);
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
    std::string what = "copy " + where(from) + " to " + to;
    Call call;
    call.method = "PUT";
    call.key = to;
    // Same account: SharedKey covers the source; with a SAS the source needs it as well.
    call.headers = {{"x-ms-copy-source", url_of(from) + (sas_.empty() ? "" : "?" + sas_)}};
    auto started = NSBOX_TRY(send(call, what));
    return wait_for_copy(to, started.header("x-ms-copy-id"), started.header("x-ms-copy-status"), what);
  }

  Result<void> probe(const std::string& prefix) override {
    NSBOX_CHECK(list(prefix, true, "", 1));
    return {};
  }

  // Uncommitted blocks need no abort: Azure drops them after a week.
  void stop() override { http_.stop(); }

 private:
  std::string where(const std::string& key) const { return "azblob://" + account_ + "/" + mount_.bucket + "/" + key; }

  std::string path_of(const std::string& key) const {
    std::string path = base_path_ + "/" + uri_encode(mount_.bucket);
    if (!key.empty()) path += "/" + uri_encode(key, true);
    return path;
  }
  std::string url_of(const std::string& key) const { return scheme_ + "://" + host_ + path_of(key); }

  Result<std::string> upload_in_blocks(const std::string& key, int fd, uint64_t size) {
    // Equal blocks of at least 8 MiB, at most 50,000 of them.
    PartPlan plan = plan_parts(size, kMinBlockSize, kMaxBlocks);
    uint64_t tag = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
    std::string what = "upload " + where(key);

    auto put_block = [&](uint64_t i, uint64_t offset, uint64_t length) -> Result<void> {
      Call put;
      put.method = "PUT";
      put.key = key;
      put.query = {{"comp", "block"}, {"blockid", block_id(tag, i)}};
      put.body_fd = fd;
      put.body_offset = offset;
      put.body_length = length;
      NSBOX_CHECK(send(put, what + " (block " + std::to_string(i + 1) + " of " + std::to_string(plan.count) + ")"));
      return {};
    };
    // A failure leaves the blocks already sent uncommitted: they are not part of the blob,
    // and the service drops them after a week.
    NSBOX_CHECK(upload_parts(plan, size, kParallelBlocks, put_block));

    Call commit;
    commit.method = "PUT";
    commit.key = key;
    commit.query = {{"comp", "blocklist"}};
    commit.headers = {{"content-type", "application/xml"}};
    commit.body = "<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>";
    for (uint64_t i = 0; i < plan.count; ++i) commit.body += "<Latest>" + block_id(tag, i) + "</Latest>";
    commit.body += "</BlockList>";
    auto done = NSBOX_TRY(send(commit, what + " (commit " + std::to_string(plan.count) + " blocks)"));
    return done.header("etag");
  }

  // Polls the destination's copy status until this copy (`id`) succeeds, fails, or takes
  // longer than kCopyWait, when it is aborted.
  Result<void> wait_for_copy(const std::string& to, const std::string& id, std::string status,
                             const std::string& what) {
    auto deadline = std::chrono::steady_clock::now() + kCopyWait;
    std::string description;
    for (int poll = 0; status == "pending"; ++poll) {
      if (std::chrono::steady_clock::now() >= deadline) {
        abort_copy(to, id);
        return fail(
            remote_error(EIO, what + ": still pending after " + std::to_string(kCopyWait.count()) + " s; aborted"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(100 << std::min(poll, 4), 1000)));
      Call call;
      call.method = "HEAD";
      call.key = to;
      auto r = NSBOX_TRY(send(call, what + " (status)"));
      if (!id.empty() && r.header("x-ms-copy-id") != id)
        return fail(remote_error(EIO, what + ": the destination was replaced while the copy ran"));
      status = r.header("x-ms-copy-status");
      description = r.header("x-ms-copy-status-description");
    }
    if (status != "success" && !status.empty())
      return fail(remote_error(
          EIO, redact(what + ": copy " + status + (description.empty() ? "" : ": " + description), secrets_)));
    return {};
  }

  void abort_copy(const std::string& to, const std::string& id) {
    Call call;
    call.method = "PUT";
    call.key = to;
    call.query = {{"comp", "copy"}, {"copyid", id}};
    call.headers = {{"x-ms-copy-action", "abort"}};
    (void)send(call, "abort the copy to " + where(to));
  }

  // The call's query, then the SAS when there is one.
  std::string url_for(const Call& call, const std::string& path) const {
    std::string query;
    for (const auto& [name, value] : call.query)
      query += (query.empty() ? "" : "&") + uri_encode(name) + "=" + uri_encode(value);
    if (!sas_.empty()) query += (query.empty() ? "" : "&") + sas_;
    return scheme_ + "://" + host_ + path + (query.empty() ? "" : "?" + query);
  }

  // The headers of one attempt: the call's, x-ms-version and x-ms-date, and SharedKey's
  // Authorization when there is a key (a SAS is in the URL; anonymous has neither).
  Headers attempt_headers(const Call& call, const std::string& path) const {
    Headers headers = call.headers;
    if (key_.empty()) {
      headers.emplace_back("x-ms-version", std::string(kAzureApiVersion));
      headers.emplace_back("x-ms-date", azure_date(std::time(nullptr)));
      return headers;
    }
    SharedKeyRequest to_sign{call.method, account_, path, call.query, call.headers};
    // libcurl sends Content-Length itself; it is signed all the same.
    uint64_t length = call.body_fd >= 0 ? call.body_length : call.body.size();
    if (length > 0) to_sign.headers.emplace_back("content-length", std::to_string(length));
    Headers auth = shared_key_sign(to_sign, key_, std::time(nullptr));
    headers.insert(headers.end(), auth.begin(), auth.end());
    return headers;
  }

  // Signs each attempt (SharedKey, a fresh date) and sends with send_with_retries.
  Result<http::Response> send(const Call& call, const std::string& what, std::initializer_list<long> accepted = {}) {
    if (key_malformed_) return fail(remote_error(EACCES, what + ": the Azure account key is not valid base64"));
    std::string path = path_of(call.key);
    return send_with_retries(http_, http_request_for(call, url_for(call, path)),
                             [&] { return attempt_headers(call, path); }, what, accepted, secrets_);
  }

  BucketMount mount_;
  std::string key_;  // the decoded account key; empty with a SAS or anonymous
  bool key_malformed_ = false;
  std::string sas_;
  BucketCredentials secrets_;
  http::Client http_;
  std::string scheme_, host_, base_path_, account_;
};

}  // namespace

std::unique_ptr<BucketClient> make_azure_client(const BucketMount& mount, const BucketCredentials& credentials,
                                                http::Limits limits) {
  return std::make_unique<AzureClient>(mount, credentials, limits);
}

}  // namespace nsbox::bucket
