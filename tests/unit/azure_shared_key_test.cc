// SharedKey signing, checked against the examples of Azure's "Authorize with Shared Key"
// page, against strings to sign written out here by hand from its rules, and against
// signatures computed by CPython's hmac and base64 modules rather than by our crypto.
#include <catch2/catch.hpp>

#include "mounts/bucket/azure_shared_key.h"
#include "mounts/bucket/crypto.h"
#include "tests/support/process.h"

using namespace nsbox;
using namespace nsbox::bucket;

namespace {

constexpr std::string_view kAzuriteKey =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

// base64(HMAC-SHA256(base64decode(key), string_to_sign)), computed by /usr/bin/python3.11 (Debian's
// CPython; another python3 may come first in PATH).
std::string python_signature(std::string_view key_b64, const std::string& string_to_sign) {
  auto r = test::run_process({"/usr/bin/python3.11", "-c",
                              "import base64, hashlib, hmac, sys\n"
                              "key = base64.b64decode(sys.argv[1])\n"
                              "sts = sys.stdin.buffer.read()\n"
                              "print(base64.b64encode(hmac.new(key, sts, hashlib.sha256).digest()).decode(), end='')\n",
                              std::string(key_b64)},
                             {.stdin_data = string_to_sign, .timeout_s = 30});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return r.out;
}

std::string decoded_key() { return base64_decode(kAzuriteKey).value(); }

}  // namespace

TEST_CASE("azure shared key: the canonicalized resource matches the documented examples", "[azure]") {
  CHECK(canonicalized_resource("myaccount", "/mycontainer", {{"restype", "container"}, {"comp", "metadata"}}) ==
        "/myaccount/mycontainer\ncomp:metadata\nrestype:container");
  // A repeated parameter: one line, its values sorted and comma-joined.
  CHECK(canonicalized_resource("myaccount", "/mycontainer",
                               {{"restype", "container"}, {"comp", "list"}, {"include", "snapshots"},
                                {"include", "metadata"}, {"include", "uncommittedblobs"}}) ==
        "/myaccount/mycontainer\ncomp:list\ninclude:metadata,snapshots,uncommittedblobs\nrestype:container");
  CHECK(canonicalized_resource("myaccount", "/mycontainer/photos/myphoto", {}) ==
        "/myaccount/mycontainer/photos/myphoto");
  // Names are lowercased; values are kept as they are (decoded: '/' and '=' stay raw).
  CHECK(canonicalized_resource("acct", "/c", {{"Prefix", "a/B c="}}) == "/acct/c\nprefix:a/B c=");
  // An empty value keeps its line.
  CHECK(canonicalized_resource("acct", "/c", {{"marker", ""}}) == "/acct/c\nmarker:");
}

TEST_CASE("azure shared key: an emulator URL names the account twice in the resource", "[azure]") {
  // http://127.0.0.1:10000/devstoreaccount1/c/b: the account, then the path as sent.
  CHECK(canonicalized_resource("devstoreaccount1", "/devstoreaccount1/c/b", {}) ==
        "/devstoreaccount1/devstoreaccount1/c/b");
  // The path is signed as sent, percent-encoding included.
  CHECK(canonicalized_resource("devstoreaccount1", "/devstoreaccount1/c/a%20b", {}) ==
        "/devstoreaccount1/devstoreaccount1/c/a%20b");
}

TEST_CASE("azure shared key: only x-ms-* headers are canonicalized, lowercased, sorted and folded", "[azure]") {
  Headers headers = {{"X-MS-Version", "2021-08-06"},
                     {"Content-Type", "text/plain"},
                     {"x-ms-meta-Name", "  two   words  "},
                     {"x-ms-date", "Sun, 06 Nov 1994 08:49:37 GMT"},
                     {"x-ms-blob-type", "BlockBlob"},
                     {"x-ms-meta-name", "again"},
                     {"authorization", "x"}};
  CHECK(canonicalized_headers(headers) ==
        "x-ms-blob-type:BlockBlob\n"
        "x-ms-date:Sun, 06 Nov 1994 08:49:37 GMT\n"
        "x-ms-meta-name:two words,again\n"
        "x-ms-version:2021-08-06\n");
  CHECK(canonicalized_headers({}) == "");
}

TEST_CASE("azure shared key: x-ms-date is RFC 1123 in English whatever the locale", "[azure]") {
  CHECK(azure_date(784111777) == "Sun, 06 Nov 1994 08:49:37 GMT");
  CHECK(azure_date(0) == "Thu, 01 Jan 1970 00:00:00 GMT");
  CHECK(azure_date(1709251199) == "Thu, 29 Feb 2024 23:59:59 GMT");
}

TEST_CASE("azure shared key: the string to sign of a pinned ranged read puts If-Match in its line", "[azure]") {
  SharedKeyRequest request{"GET", "devstoreaccount1", "/devstoreaccount1/photos/dir/a.jpg", {},
                           {{"x-ms-range", "bytes=0-1023"},
                            {"If-Match", "\"0x8D\""},
                            {"x-ms-date", "Sun, 06 Nov 1994 08:49:37 GMT"},
                            {"x-ms-version", "2021-08-06"}}};
  CHECK(shared_key_string_to_sign(request) ==
        "GET\n"
        "\n\n\n\n\n"  // Content-Encoding, -Language, -Length, -MD5, -Type
        "\n"          // Date: x-ms-date is sent
        "\n"          // If-Modified-Since
        "\"0x8D\"\n"  // If-Match
        "\n\n"        // If-None-Match, If-Unmodified-Since
        "\n"          // Range: x-ms-range is a canonicalized header instead
        "x-ms-date:Sun, 06 Nov 1994 08:49:37 GMT\n"
        "x-ms-range:bytes=0-1023\n"
        "x-ms-version:2021-08-06\n"
        "/devstoreaccount1/devstoreaccount1/photos/dir/a.jpg");
}

TEST_CASE("azure shared key: Content-Length is signed, except a zero one, which is empty", "[azure]") {
  Headers common = {{"x-ms-date", "Sun, 06 Nov 1994 08:49:37 GMT"}, {"x-ms-version", "2021-08-06"}};
  SharedKeyRequest block{"PUT", "acct", "/c/big", {{"comp", "block"}, {"blockid", "AAAA+/=="}}, common};
  block.headers.emplace_back("Content-Length", "8388608");
  CHECK(shared_key_string_to_sign(block) ==
        "PUT\n\n\n8388608\n\n\n\n\n\n\n\n\n"
        "x-ms-date:Sun, 06 Nov 1994 08:49:37 GMT\nx-ms-version:2021-08-06\n"
        "/acct/c/big\nblockid:AAAA+/==\ncomp:block");
  SharedKeyRequest empty{"PUT", "acct", "/c/empty", {}, common};
  empty.headers.emplace_back("content-length", "0");
  empty.headers.emplace_back("x-ms-blob-type", "BlockBlob");
  CHECK(shared_key_string_to_sign(empty) ==
        "PUT\n\n\n\n\n\n\n\n\n\n\n\n"
        "x-ms-blob-type:BlockBlob\nx-ms-date:Sun, 06 Nov 1994 08:49:37 GMT\nx-ms-version:2021-08-06\n"
        "/acct/c/empty");
  // A Date header is signed only when no x-ms-date is sent.
  SharedKeyRequest dated{"DELETE", "acct", "/c/x", {}, {{"Date", "Sun, 06 Nov 1994 08:49:37 GMT"}}};
  CHECK(shared_key_string_to_sign(dated) == "DELETE\n\n\n\n\n\nSun, 06 Nov 1994 08:49:37 GMT\n\n\n\n\n\n/acct/c/x");
}

TEST_CASE("azure shared key: the signature is base64(HMAC-SHA256) keyed with the decoded account key", "[azure]") {
  std::string sts =
      "GET\n\n\n\n\n\n\n\n\n\n\n\n"
      "x-ms-date:Sun, 06 Nov 1994 08:49:37 GMT\nx-ms-version:2021-08-06\n"
      "/devstoreaccount1/devstoreaccount1/c\ncomp:list\nmaxresults:1\nrestype:container";
  std::string expected = python_signature(kAzuriteKey, sts);
  CHECK(expected.size() == 44);
  CHECK(shared_key_authorization("devstoreaccount1", decoded_key(), sts) == "SharedKey devstoreaccount1:" + expected);
  // Another key, another signature: the key is really in it.
  std::string other = base64_encode(std::string(64, 'k'));
  CHECK(shared_key_authorization("devstoreaccount1", std::string(64, 'k'), sts) ==
        "SharedKey devstoreaccount1:" + python_signature(other, sts));
}

TEST_CASE("azure shared key: signing adds x-ms-date, x-ms-version and an Authorization over them", "[azure]") {
  SharedKeyRequest request{"GET", "devstoreaccount1", "/devstoreaccount1/c",
                           {{"restype", "container"}, {"comp", "list"}, {"prefix", "dir/"}, {"maxresults", "1"}}, {}};
  Headers added = shared_key_sign(request, decoded_key(), 784111777);
  REQUIRE(added.size() == 3);
  CHECK(added[0] == std::pair<std::string, std::string>("x-ms-date", "Sun, 06 Nov 1994 08:49:37 GMT"));
  CHECK(added[1] == std::pair<std::string, std::string>("x-ms-version", std::string(kAzureApiVersion)));
  CHECK(added[2].first == "authorization");
  std::string sts = "GET\n\n\n\n\n\n\n\n\n\n\n\n"
                    "x-ms-date:Sun, 06 Nov 1994 08:49:37 GMT\nx-ms-version:" + std::string(kAzureApiVersion) + "\n"
                    "/devstoreaccount1/devstoreaccount1/c\ncomp:list\nmaxresults:1\nprefix:dir/\nrestype:container";
  CHECK(added[2].second == "SharedKey devstoreaccount1:" + python_signature(kAzuriteKey, sts));
  // A request that brings its own x-ms-version keeps it, and it is what gets signed.
  request.headers = {{"x-ms-version", "2020-10-02"}};
  Headers own = shared_key_sign(request, decoded_key(), 784111777);
  REQUIRE(own.size() == 2);
  CHECK(own[0].first == "x-ms-date");
  CHECK(own[1].second != added[2].second);
}
