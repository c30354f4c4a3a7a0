// Bucket mount specs: the --mount syntax, manifests, where credentials come from, and
// that what is stored or shown never holds a secret.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>

#include "mounts/bucket/mount_spec.h"

using namespace nsbox::bucket;

TEST_CASE("a --mount flag names the store, the bucket, the prefix and the path, read-only unless :rw") {
  auto s3 = parse_mount_flag("s3://photos/2026/june:/data:rw");
  REQUIRE(s3);
  CHECK(s3->kind == BucketKind::kS3);
  CHECK(s3->bucket == "photos");
  CHECK(s3->prefix == "2026/june/");
  CHECK(s3->mount_path == "/data");
  CHECK_FALSE(s3->read_only);

  auto r2 = parse_mount_flag("r2://memories:agent/memory");
  REQUIRE(r2);
  CHECK(r2->kind == BucketKind::kR2);
  CHECK(r2->prefix.empty());
  CHECK(r2->mount_path == "/home/user/agent/memory");  // relative paths are under the home
  CHECK(r2->read_only);

  auto gs = parse_mount_flag("gs://logs/app:/logs:ro");
  REQUIRE(gs);
  CHECK(gs->kind == BucketKind::kGcs);
  CHECK(gs->read_only);

  auto az = parse_mount_flag("azblob://acct/container/some/prefix:/blobs");
  REQUIRE(az);
  CHECK(az->kind == BucketKind::kAzureBlob);
  CHECK(az->account == "acct");
  CHECK(az->bucket == "container");
  CHECK(az->prefix == "some/prefix/");
}

TEST_CASE("a mount spec that cannot work is refused with what is wrong") {
  auto error_of = [](const char* flag) { return parse_mount_flag(flag).error().message; };
  CHECK(error_of("photos:/data").find("no scheme") != std::string::npos);
  CHECK(error_of("ftp://photos:/data").find("unknown mount scheme") != std::string::npos);
  CHECK(error_of("s3://photos").find("no mount path") != std::string::npos);
  CHECK(error_of("s3://photos:/proc/x").find("/proc belongs to the sandbox") != std::string::npos);
  CHECK(error_of("s3://photos:/mnt/files").find("/mnt/files belongs to the sandbox") != std::string::npos);
  CHECK(error_of("s3://photos:/").find("cannot be mounted over /") != std::string::npos);
  CHECK(error_of("s3://photos:/data/../etc").find("not a plain absolute path") != std::string::npos);
  CHECK(error_of("s3://photos/a/../b:/data").find("'..' segment") != std::string::npos);
  CHECK(error_of("s3://:/data").find("needs a bucket") != std::string::npos);
}

TEST_CASE("a manifest lists mounts with the fields of the hosted workbenches") {
  auto mounts = parse_manifest(R"({"mounts": [
      {"type": "s3", "bucket": "b", "prefix": "p", "region": "eu-west-1", "endpoint_url": "http://127.0.0.1:9000",
       "mount_path": "data", "read_only": false},
      {"type": "azure_blob", "account": "acct", "container": "c", "mount_path": "/blobs", "strategy": "rclone"}]})",
                               "m.json");
  REQUIRE(mounts);
  REQUIRE(mounts->size() == 2);
  CHECK((*mounts)[0].mount_path == "/home/user/data");
  CHECK((*mounts)[0].region == "eu-west-1");
  CHECK_FALSE((*mounts)[0].read_only);
  CHECK((*mounts)[1].strategy == MountStrategy::kRclone);
  CHECK((*mounts)[1].read_only);

  auto bad = parse_manifest(R"([{"type": "s3", "bucket": "b", "mount_path": "/d", "strategy": "magic"}])", "m.json");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("m.json, entry 1") != std::string::npos);
  CHECK(bad.error().message.find("unknown mount strategy 'magic'") != std::string::npos);
  CHECK_FALSE(parse_manifest("{not json", "m.json"));
}

TEST_CASE("credentials come from the environment or a credentials file and are never stored") {
  Environment env = {{"AWS_ACCESS_KEY_ID", "AKID"}, {"AWS_SECRET_ACCESS_KEY", "s3cr3t/value"}, {"AWS_SESSION_TOKEN", "tok3n"},
                     {"AWS_REGION", "eu-central-1"}};
  auto m = parse_mount_flag("s3://dotless:/data");
  REQUIRE(m);
  auto c = resolve(*m, env);
  REQUIRE(c);
  CHECK(c->access_key_id == "AKID");
  CHECK(c->session_token == "tok3n");
  CHECK(m->region == "eu-central-1");
  CHECK(m->endpoint_url == "https://s3.eu-central-1.amazonaws.com");
  CHECK_FALSE(m->path_style);  // AWS's own endpoint: virtual-host addressing
  std::string stored = m->to_json().dump();
  CHECK(stored.find("s3cr3t") == std::string::npos);
  CHECK(stored.find("tok3n") == std::string::npos);
  CHECK(redact("GET failed: s3cr3t/value and tok3n", *c) == "GET failed: [redacted] and [redacted]");

  char path[] = "/tmp/nsbox-credentials-XXXXXX";
  int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::close(fd);
  std::ofstream(path) << "# for the photos bucket\nexport AWS_ACCESS_KEY_ID=FILEID\nAWS_SECRET_ACCESS_KEY=\"from file\"\n";
  auto from_file = BucketMount::from_json({{"bucket", "b"}, {"mount_path", "/d"}, {"credentials_file", path}});
  REQUIRE(from_file);
  auto fc = resolve(*from_file, env);
  ::unlink(path);
  REQUIRE(fc);
  CHECK(fc->access_key_id == "FILEID");
  CHECK(fc->secret_access_key == "from file");
  CHECK(fc->session_token.empty());  // the file, not the environment

  auto half = parse_mount_flag("s3://b:/d");
  auto only_id = resolve(*half, {{"AWS_ACCESS_KEY_ID", "AKID"}});
  REQUIRE_FALSE(only_id);
  CHECK(only_id.error().message.find("without its secret") != std::string::npos);

  auto anonymous = resolve(*half, {});
  REQUIRE(anonymous);
  CHECK(anonymous->anonymous());
}

TEST_CASE("R2, GCS and Azure mounts get their services' endpoints") {
  auto r2 = parse_mount_flag("r2://b:/d");
  auto missing = resolve(*r2, {});
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message.find("account id") != std::string::npos);
  REQUIRE(resolve(*r2, {{"R2_ACCOUNT_ID", "abc123"}}));
  CHECK(r2->endpoint_url == "https://abc123.r2.cloudflarestorage.com");
  CHECK(r2->region == "auto");

  auto gs = parse_mount_flag("gs://b:/d");
  auto gc = resolve(*gs, {{"GCS_HMAC_ACCESS_ID", "GOOG1"}, {"GCS_HMAC_SECRET", "gsecret"}});
  REQUIRE(gc);
  CHECK(gs->endpoint_url == "https://storage.googleapis.com");
  CHECK(gc->access_key_id == "GOOG1");

  auto az = parse_mount_flag("azblob://acct/c:/d");
  auto ac = resolve(*az, {{"AZURE_STORAGE_SAS_TOKEN", "?sv=2021&sig=abc"}});
  REQUIRE(ac);
  CHECK(az->endpoint_url == "https://acct.blob.core.windows.net");
  CHECK(ac->azure_sas == "sv=2021&sig=abc");
}
