// A bucket's listing as the mount's server reads it: the S3 client's ListObjectsV2 and
// the Azure client's List Blobs, over HTTP from a remote that answers with the input, and
// the directory a readdir then sees (DirectoryStream). The remote is a loopback server in
// this process, so the real clients, URL building and libcurl are all in the path. The
// input is the reply's body; a control word from its end (little-endian) picks the
// protocol (bit 0: Azure), the delimiter (bit 1), a continuation token (bit 2), the
// status (byte 1) and the listed prefix (byte 2).
//
// Checks: a page's entries have names (a key equal to the prefix is the directory's
// marker, not an entry); a refused status is an error with the errno it maps to; what a
// directory lists has names a directory entry can have: no '/', no NUL.
//
// Found here: a name holding '/' (from a remote that ignores the delimiter) or NUL (a
// url-encoded key) reached readdir, where the kernel refused the whole reply or libfuse
// cut the name (corpus/bucket_listing/slash-and-nul-names; tests/unit/
// directory_stream_test.cc).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include <fuzzer/FuzzedDataProvider.h>

#include "mounts/bucket/bucket_client.h"
#include "mounts/bucket/directory_stream.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using namespace nsbox::bucket;

// HTTP/1.1 with keep-alive: reads a request head, writes the current reply, again.
class Remote {
 public:
  Remote() {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    FUZZ_CHECK(::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(listener_, 16) == 0);
    socklen_t len = sizeof a;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    std::thread([this] { serve(); }).detach();
  }
  int port() const { return port_; }
  void answer(long status, const std::string& body) {
    std::lock_guard lock(mutex_);
    status_ = status;
    body_ = body;
  }

 private:
  void serve() {
    for (;;) {
      int c = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      std::thread([this, c] { connection(c); }).detach();
    }
  }
  void connection(int c) {
    std::string in;
    char buf[4096];
    for (;;) {
      size_t end;
      while ((end = in.find("\r\n\r\n")) == std::string::npos) {
        ssize_t n = ::read(c, buf, sizeof buf);
        if (n <= 0) {
          ::close(c);
          return;
        }
        in.append(buf, static_cast<size_t>(n));
      }
      bool head = in.starts_with("HEAD ");
      in.erase(0, end + 4);
      std::string reply;
      {
        std::lock_guard lock(mutex_);
        reply = "HTTP/1.1 " + std::to_string(status_) + " X\r\nContent-Type: application/xml\r\nContent-Length: " +
                std::to_string(body_.size()) + "\r\n\r\n" + (head ? "" : body_);
      }
      for (size_t sent = 0; sent < reply.size();) {
        ssize_t n = ::write(c, reply.data() + sent, reply.size() - sent);
        if (n <= 0) break;
        sent += static_cast<size_t>(n);
      }
    }
  }
  int listener_ = -1;
  int port_ = 0;
  std::mutex mutex_;
  long status_ = 200;
  std::string body_;
};

struct Clients {
  Remote remote;
  std::unique_ptr<BucketClient> s3, azure;
  Clients() {
    std::string endpoint = "http://127.0.0.1:" + std::to_string(remote.port());
    BucketMount s3_mount;
    s3_mount.bucket = "bucket";
    s3_mount.region = "us-east-1";
    s3_mount.endpoint_url = endpoint;
    s3_mount.mount_path = "/data";
    s3 = make_s3_client(s3_mount, {"AKIDFUZZ", "SECRET7KEY", "", "", ""});
    BucketMount azure_mount = s3_mount;
    azure_mount.kind = BucketKind::kAzureBlob;
    azure_mount.bucket = "container";
    azure_mount.account = "devstoreaccount1";
    azure_mount.endpoint_url = endpoint + "/devstoreaccount1";
    azure = make_azure_client(azure_mount, {"", "", "", "", "sv=2025&sig=x"});
  }
};

// Never 5xx or 429: those are retried after a backoff, which only slows the fuzzer.
constexpr long kStatuses[] = {200, 200, 200, 200, 403, 404, 412};
const char* const kPrefixes[] = {"", "dir/", "a/b c/", "%2F/"};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Clients* clients = new Clients;  // for the whole run: its threads serve forever

  FuzzedDataProvider in(data, size);
  uint32_t plan = in.ConsumeIntegral<uint32_t>();
  std::string body = in.ConsumeRemainingBytesAsString();
  BucketClient& client = (plan & 1) ? *clients->azure : *clients->s3;
  bool delimited = plan & 2;
  std::string token = (plan & 4) ? "token" : "";
  long status = kStatuses[((plan >> 8) & 0xff) % std::size(kStatuses)];
  std::string prefix = kPrefixes[((plan >> 16) & 0xff) % std::size(kPrefixes)];
  clients->remote.answer(status, body);

  auto page = client.list(prefix, delimited, token, 1000);
  if (status != 200) {
    FUZZ_CHECK(!page);
    int expected = status == 404 ? ENOENT : status == 403 ? EACCES : status == 412 ? ESTALE : EIO;
    FUZZ_CHECK(page.error().sys_errno == expected);
    return 0;
  }
  if (!page) return 0;  // malformed XML
  for (const auto& e : page->entries) FUZZ_CHECK(!e.name.empty());

  // What readdir would list, when the listing is one page: the remote answers the same
  // every time, and a page that names a next one would be fetched without end (reported:
  // pages with no entries and a token keep at() asking).
  if (!page->next_token.empty()) return 0;
  DirectoryStream stream(client, prefix, {});
  for (uint64_t i = 0; i < 2 * page->entries.size() + 1; ++i) {
    auto entry = stream.at(i);
    if (!entry || !*entry) break;
    const std::string& name = (*entry)->name;
    FUZZ_CHECK(!name.empty() && name != "." && name != ".." && name.size() <= 255);
    FUZZ_CHECK(name.find('/') == std::string::npos && name.find('\0') == std::string::npos);
  }
  (void)stream.take_whole();
  return 0;
}
