// What the S3 client puts on the wire for path-style and virtual-host addressing, seen by
// an HTTP server on loopback that records the request and answers an empty listing.
#include <catch2/catch.hpp>

#include "mounts/bucket/bucket_client.h"
#include "tests/support/loopback_http.h"

using namespace nsbox::bucket;
using nsbox::test::LoopbackHttpServer;

namespace {

const std::string kEmptyListing = "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>";

std::string header_line(const std::string& request, const std::string& name) {
  auto at = request.find("\r\n" + name + ": ");
  if (at == std::string::npos) return {};
  at += 2;
  return request.substr(at, request.find("\r\n", at) - at);
}

}  // namespace

TEST_CASE("path-style requests name the bucket in the path, virtual-host ones in the Host header") {
  BucketCredentials keys{"AKID", "secret", "", "", ""};
  {
    LoopbackHttpServer server(nsbox::test::http_ok(kEmptyListing));
    auto mount = BucketMount::from_json({{"bucket", "photos"}, {"prefix", "2026"}, {"mount_path", "/d"},
                                         {"endpoint_url", "http://127.0.0.1:" + std::to_string(server.port())}});
    REQUIRE(mount);
    REQUIRE(make_s3_client(*mount, keys)->probe("2026/"));
    REQUIRE(server.requests().size() == 1);
    std::string request = server.requests()[0];
    CHECK(request.rfind("GET /photos/?", 0) == 0);
    CHECK(header_line(request, "Host") == "Host: 127.0.0.1:" + std::to_string(server.port()));
    CHECK(request.find("prefix=2026%2F") != std::string::npos);
    CHECK(header_line(request, "Authorization").find("SignedHeaders=host;x-amz-content-sha256;x-amz-date") != std::string::npos);
  }
  {
    LoopbackHttpServer server(nsbox::test::http_ok(kEmptyListing));
    // *.localhost resolves to loopback inside libcurl: a virtual host without DNS.
    auto mount = BucketMount::from_json({{"bucket", "photos"}, {"mount_path", "/d"}, {"path_style", false},
                                         {"endpoint_url", "http://s3.localhost:" + std::to_string(server.port())}});
    REQUIRE(mount);
    REQUIRE(make_s3_client(*mount, keys)->probe(""));
    REQUIRE(server.requests().size() == 1);
    std::string request = server.requests()[0];
    CHECK(request.rfind("GET /?", 0) == 0);
    CHECK(header_line(request, "Host") == "Host: photos.s3.localhost:" + std::to_string(server.port()));
  }
  {
    LoopbackHttpServer server(nsbox::test::http_ok(kEmptyListing));
    auto mount = BucketMount::from_json({{"bucket", "photos"}, {"mount_path", "/d"},
                                         {"endpoint_url", "http://127.0.0.1:" + std::to_string(server.port())}});
    REQUIRE(make_s3_client(*mount, {})->probe(""));  // anonymous: nothing signed
    REQUIRE(server.requests().size() == 1);
    std::string request = server.requests()[0];
    CHECK(header_line(request, "Authorization").empty());
    CHECK(header_line(request, "x-amz-date").empty());
  }
}
