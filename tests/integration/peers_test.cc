// The object stores the bucket-mount tests run against: each starts, stores and returns
// bytes through a real client, checks credentials the way the tests rely on, and goes away
// without a trace.
#include <signal.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/support/host_features.h"
#include "tests/support/object_store_peers.h"
#include "tests/support/process.h"

using namespace nsbox::test;
using nlohmann::json;

namespace {

// Debian's CPython, which has python3-boto3: an earlier python3 on PATH may not. Without
// AWS_CA_BUNDLE (this machine's points at a proxy's CA) and without proxies, which would
// otherwise see requests meant for 127.0.0.1.
ProcessResult python(const std::string& script, const std::vector<std::string>& env,
                     const std::string& stdin_data = {}) {
  std::vector<std::string> argv = {"/usr/bin/env", "-u", "AWS_CA_BUNDLE", "-u", "http_proxy", "-u", "https_proxy",
                                   "-u", "HTTP_PROXY", "-u", "HTTPS_PROXY"};
  argv.insert(argv.end(), env.begin(), env.end());
  argv.insert(argv.end(), {"/usr/bin/python3.11", "-c", script});
  return run_process(argv, {.stdin_data = stdin_data, .timeout_s = 60});
}

constexpr const char* kBoto3Client = R"(
import os, sys, boto3, botocore.config
s3 = boto3.client("s3", endpoint_url=os.environ["ENDPOINT"], region_name="us-east-1",
                  aws_access_key_id=os.environ["ACCESS_KEY"], aws_secret_access_key=os.environ["SECRET_KEY"],
                  config=botocore.config.Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
)";

std::vector<std::string> s3_env(const S3rverPeer& s3) {
  return {"ENDPOINT=" + s3.endpoint(), "ACCESS_KEY=" + std::string(S3rverPeer::access_key()),
          "SECRET_KEY=" + std::string(S3rverPeer::secret_key())};
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool process_exists(pid_t pid) { return ::kill(pid, 0) == 0 || errno != ESRCH; }

}  // namespace

TEST_CASE("the object-store peers are installed (scripts/install-deps)", "[peers]") {
  NSBOX_NEEDS(node_peers());
  CHECK(peers_installed());
}

TEST_CASE("s3rver stores the bytes boto3 puts and returns them unchanged", "[peers]") {
  NSBOX_NEEDS(node_peers());
  S3rverPeer s3({"peers-test"});
  std::string data;
  for (int i = 0; i < 300000; ++i) data += static_cast<char>((i * 7919) & 0xff);
  auto r = python(std::string(kBoto3Client) + R"(
data = sys.stdin.buffer.read()
s3.put_object(Bucket="peers-test", Key="dir/blob.bin", Body=data)
sys.stdout.buffer.write(s3.get_object(Bucket="peers-test", Key="dir/blob.bin")["Body"].read())
)", s3_env(s3), data);
  INFO(r.err << "\ns3rver's output:\n" << s3.log());
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.size() == data.size());
  CHECK(r.out == data);
  // Stored as a plain file under data_dir(), which failure tests may inspect or damage.
  CHECK(read_file(s3.data_dir() + "/peers-test/dir/blob.bin._S3rver_object") == data);
}

TEST_CASE("s3rver pages a listing: its continuation token works on this Node", "[peers]") {
  NSBOX_NEEDS(node_peers());
  S3rverPeer s3({"peers-test"});
  auto r = python(std::string(kBoto3Client) + R"(
for key in ("a", "b", "c"):
    s3.put_object(Bucket="peers-test", Key=key, Body=key.encode())
pages = s3.get_paginator("list_objects_v2").paginate(Bucket="peers-test", PaginationConfig={"PageSize": 1})
print(" ".join("+".join(o["Key"] for o in page.get("Contents", [])) for page in pages))
)", s3_env(s3));
  INFO(r.err << "\ns3rver's output:\n" << s3.log());
  REQUIRE(r.exit_code == 0);
  // Three pages of one key: each page after the first came from a continuation token.
  CHECK(r.out == "a b c\n");
}

TEST_CASE("azurite refuses unsigned and wrongly signed requests and serves SharedKey-signed ones", "[peers]") {
  NSBOX_NEEDS(node_peers());
  AzuritePeer az;
  // A minimal SharedKey signer (Azure's "Authorize with Shared Key", version 2015-02-21+),
  // path style: the canonical resource names the account twice.
  auto r = python(R"(
import base64, hashlib, hmac, json, os, re, urllib.error, urllib.request
from email.utils import formatdate
endpoint, account, good_key = os.environ["ENDPOINT"], os.environ["ACCOUNT"], os.environ["KEY"]

def call(method, path, query={}, body=None, headers={}, key=good_key):
    h = {"x-ms-date": formatdate(usegmt=True), "x-ms-version": "2021-08-06", **headers}
    if body is not None:
        h["Content-Type"] = "application/octet-stream"
    if key:
        x_ms = "".join(f"{k}:{v}\n" for k, v in sorted(h.items()) if k.startswith("x-ms-"))
        resource = f"/{account}/{account}{path}" + "".join(f"\n{k}:{v}" for k, v in sorted(query.items()))
        length = str(len(body)) if body else ""
        fields = [method, "", "", length, "", h.get("Content-Type", ""), "", "", "", "", "", ""]
        to_sign = "\n".join(fields) + "\n" + x_ms + resource
        mac = hmac.new(base64.b64decode(key), to_sign.encode(), hashlib.sha256).digest()
        h["Authorization"] = f"SharedKey {account}:{base64.b64encode(mac).decode()}"
    url = f"{endpoint}/{account}{path}" + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")
    req = urllib.request.Request(url, data=body, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return [resp.status, resp.read().decode("latin-1")]
    except urllib.error.HTTPError as e:
        text = e.read().decode("latin-1")
        code = re.search(r"<Code>([^<]*)</Code>", text)
        return [e.code, code.group(1) if code else text]

wrong_key = base64.b64encode(b"not the account key").decode()
print(json.dumps({
    "unsigned": call("GET", "", {"comp": "list"}, key=None),
    "wrong_key": call("GET", "", {"comp": "list"}, key=wrong_key),
    "create": call("PUT", "/box", {"restype": "container"}, body=b"")[0],
    "put": call("PUT", "/box/dir/blob.txt", body=b"hello azure\n", headers={"x-ms-blob-type": "BlockBlob"})[0],
    "get": call("GET", "/box/dir/blob.txt"),
}))
)", {"ENDPOINT=" + az.endpoint(), "ACCOUNT=" + std::string(AzuritePeer::account()),
      "KEY=" + std::string(AzuritePeer::account_key())});
  INFO(r.err << "\nazurite's output:\n" << az.log());
  REQUIRE(r.exit_code == 0);
  auto doc = json::parse(r.out);
  INFO(doc.dump());
  CHECK(doc["unsigned"][0] == 403);
  CHECK(doc["unsigned"][1] == "AuthorizationFailure");
  CHECK(doc["wrong_key"][0] == 403);
  CHECK(doc["wrong_key"][1] == "AuthorizationFailure");
  CHECK(doc["create"] == 201);
  CHECK(doc["put"] == 201);
  CHECK(doc["get"] == json::array({200, "hello azure\n"}));
}

TEST_CASE("a peer stops on request, or at once when killed, and its directory goes with it", "[peers]") {
  NSBOX_NEEDS(node_peers());
  std::string s3_dir, az_dir;
  pid_t s3_pid = 0, az_pid = 0;
  {
    S3rverPeer s3;
    AzuritePeer az;
    s3_dir = s3.data_dir();
    az_dir = az.data_dir();
    s3_pid = s3.pid();
    az_pid = az.pid();
    REQUIRE(process_exists(s3_pid));
    REQUIRE(process_exists(az_pid));

    s3.stop();
    CHECK_FALSE(s3.running());
    CHECK_FALSE(process_exists(s3_pid));
    az.kill_now();
    CHECK_FALSE(az.running());
    CHECK_FALSE(process_exists(az_pid));
    s3.stop();  // again: nothing to do
    CHECK(std::filesystem::exists(s3_dir));  // kept until the object goes
  }
  CHECK_FALSE(std::filesystem::exists(s3_dir));
  CHECK_FALSE(std::filesystem::exists(az_dir));
}

TEST_CASE("a peer still running when its object goes is stopped", "[peers]") {
  NSBOX_NEEDS(node_peers());
  pid_t pid = 0;
  {
    S3rverPeer s3;
    pid = s3.pid();
    REQUIRE(process_exists(pid));
  }
  CHECK_FALSE(process_exists(pid));
}
