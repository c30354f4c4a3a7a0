// The SigV4 signer against AWS's published S3 examples and against botocore (Debian's
// python3-botocore) signing the same requests: s3rver does not check signatures, so this
// is where a wrong one would be caught.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "mounts/bucket/crypto.h"
#include "mounts/bucket/sigv4.h"
#include "tests/support/process.h"

using namespace nsbox::bucket;
using nlohmann::json;

namespace {

constexpr std::time_t k2013_05_24 = 1369353600;  // 20130524T000000Z
const AwsCredentials kExampleKey{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};
const std::string kEmptySha = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

std::string header(const Headers& headers, const std::string& name) {
  for (const auto& [n, v] : headers)
    if (n == name) return v;
  return {};
}

std::string signature_of(const Headers& headers) {
  std::string auth = header(headers, "Authorization");
  return auth.substr(auth.find("Signature=") + 10);
}

}  // namespace

TEST_CASE("SigV4 matches AWS's published S3 examples") {
  SECTION("GET an object with a range") {
    SigV4Request r{"GET", "examplebucket.s3.amazonaws.com", "/test.txt", {}, {{"Range", "bytes=0-9"}}, kEmptySha};
    auto h = sigv4_sign(r, kExampleKey, {"us-east-1", "s3"}, k2013_05_24);
    CHECK(header(h, "x-amz-date") == "20130524T000000Z");
    CHECK(header(h, "Authorization") ==
          "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
          "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
          "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  }
  SECTION("PUT an object with a signed payload") {
    std::string body = "Welcome to Amazon S3.";
    SigV4Request r{"PUT",
                   "examplebucket.s3.amazonaws.com",
                   "/" + uri_encode("test$file.text", true),
                   {},
                   {{"Date", "Fri, 24 May 2013 00:00:00 GMT"}, {"x-amz-storage-class", "REDUCED_REDUNDANCY"}},
                   to_hex(sha256_raw(body))};
    auto h = sigv4_sign(r, kExampleKey, {"us-east-1", "s3"}, k2013_05_24);
    CHECK(signature_of(h) == "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
  }
  SECTION("GET a bucket listing with a query") {
    SigV4Request r{"GET", "examplebucket.s3.amazonaws.com", "/", {{"max-keys", "2"}, {"prefix", "J"}}, {}, kEmptySha};
    auto h = sigv4_sign(r, kExampleKey, {"us-east-1", "s3"}, k2013_05_24);
    CHECK(signature_of(h) == "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
  }
  SECTION("a flag-only query parameter") {
    SigV4Request r{"GET", "examplebucket.s3.amazonaws.com", "/", {{"lifecycle", ""}}, {}, kEmptySha};
    auto h = sigv4_sign(r, kExampleKey, {"us-east-1", "s3"}, k2013_05_24);
    CHECK(signature_of(h) == "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
  }
}

TEST_CASE("SigV4 signs what botocore signs, byte for byte", "[botocore]") {
  struct Case {
    std::string method, host, key;
    std::vector<std::pair<std::string, std::string>> query;
    Headers headers;
    std::string body;
    bool unsigned_payload;
    std::string token, region;
  };
  std::vector<Case> cases = {
      {"GET", "127.0.0.1:9000", "bkt/reports/2026 Q3 (final).csv", {}, {{"Range", "bytes=100-199"}}, "", false, "", "us-east-1"},
      {"GET", "127.0.0.1:9000", "bkt/", {{"list-type", "2"}, {"prefix", "memories/é ü/"}, {"delimiter", "/"}, {"max-keys", "1000"},
                                        {"continuation-token", "a+b/c=="}}, {}, "", false, "", "eu-west-3"},
      {"PUT", "s3.example.test", "bkt/data/x~y_z-1.bin", {}, {{"Content-Type", "application/octet-stream"}}, "", true,
       "FwoGZXIvYXdzEJr//////////wEaDOSESSIONTOKEN", "us-west-2"},
      {"POST", "bkt.s3.localhost:4568", "big.bin", {{"uploads", ""}}, {}, "", false, "", "auto"},
      {"POST", "127.0.0.1:9000", "bkt/big.bin", {{"uploadId", "xyz/123+="}}, {},
       "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber></Part></CompleteMultipartUpload>", false, "", "us-east-1"},
      {"PUT", "127.0.0.1:9000", "bkt/copy target", {}, {{"x-amz-copy-source", "/bkt/source%20key"}}, "", false, "", "us-east-1"},
  };
  std::time_t now = 1796000000;
  json requests = json::array();
  std::vector<Headers> ours;
  for (const auto& c : cases) {
    std::string path = "/" + uri_encode(c.key, true);
    std::string query = canonical_query(c.query);
    std::string payload = c.unsigned_payload ? std::string(kUnsignedPayload) : to_hex(sha256_raw(c.body));
    SigV4Request r{c.method, c.host, path, c.query, c.headers, payload};
    ours.push_back(sigv4_sign(r, {"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", c.token}, {c.region, "s3"}, now));
    json headers = json::object();
    for (const auto& [n, v] : c.headers) headers[n] = v;
    requests.push_back({{"method", c.method},
                        {"url", "http://" + c.host + path + (query.empty() ? "" : "?" + query)},
                        {"headers", headers},
                        {"body", c.body},
                        {"unsigned_payload", c.unsigned_payload},
                        {"access_key", "AKIDEXAMPLE"},
                        {"secret_key", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"},
                        {"session_token", c.token},
                        {"region", c.region},
                        {"timestamp", amz_date(now)}});
  }
  auto oracle = nsbox::test::run_process({"/usr/bin/python3.11", NSBOX_SOURCE_DIR "/tests/oracles/botocore_sigv4.py"},
                                         {.stdin_data = requests.dump(), .stdin_is_null = false, .timeout_s = 60,
                                          .extra_env = {}});
  INFO(oracle.err);
  REQUIRE(oracle.exit_code == 0);
  json theirs = json::parse(oracle.out);
  REQUIRE(theirs.size() == cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO("case " << i << ": " << cases[i].method << " " << cases[i].key << "\nbotocore's canonical request:\n"
                 << theirs[i]["canonical_request"].get<std::string>());
    CHECK(header(ours[i], "Authorization") == theirs[i]["authorization"].get<std::string>());
  }
}

TEST_CASE("names a listing returns encoded are decoded: S3's '+' is a space, Azure's is not") {
  CHECK(uri_decode("memories/a%20b%2Bc+d%01e", true) == std::string("memories/a b+c d\x01" "e"));
  CHECK(uri_decode("a+b%2F", false) == "a+b/");
  CHECK(uri_decode("100%", true) == "100%");      // a '%' without two hex digits stays
  CHECK(uri_decode("%zz%4", true) == "%zz%4");
  CHECK(uri_decode(uri_encode("ünïcode / 100% + more", true), false) == "ünïcode / 100% + more");
  CHECK(fold_spaces("  a \t b\r\n  c  ") == "a b c");
  CHECK(lowercase("X-Amz-Date") == "x-amz-date");
}
