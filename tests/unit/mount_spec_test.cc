// Bucket mount specs: the --mount syntax, manifests, where credentials come from, and
// that what is stored or shown never holds a secret.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

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
      {"type": "azure_blob", "account": "acct", "container": "ctr", "mount_path": "/blobs", "strategy": "rclone"}]})",
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
  struct Unlink {  // whatever REQUIRE below stops the test
    const char* path;
    ~Unlink() { ::unlink(path); }
  } unlink_after{path};
  std::ofstream(path) << "# for the photos bucket\nexport AWS_ACCESS_KEY_ID=FILEID\nAWS_SECRET_ACCESS_KEY=\"from file\"\n";
  auto from_file = BucketMount::from_json({{"bucket", "b"}, {"mount_path", "/d"}, {"credentials_file", path}});
  REQUIRE(from_file);
  auto fc = resolve(*from_file, env);
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

  auto az = parse_mount_flag("azblob://acct/ctr:/d");
  auto ac = resolve(*az, {{"AZURE_STORAGE_SAS_TOKEN", "?sv=2021&sig=abc"}});
  REQUIRE(ac);
  CHECK(az->endpoint_url == "https://acct.blob.core.windows.net");
  CHECK(ac->azure_sas == "sv=2021&sig=abc");
}

TEST_CASE("redacting a secret that is part of \"[redacted]\" ends, and replaces every occurrence") {
  BucketCredentials c;
  c.access_key_id = "AKID";
  c.secret_access_key = "red";
  CHECK(redact("red and red", c) == "[redacted] and [redacted]");
  c.secret_access_key = "]";
  CHECK(redact("a]b]", c) == "a[redacted]b[redacted]");
  c.secret_access_key = "[redacted]";
  CHECK(redact("x[redacted]y", c) == "x[redacted]y");
}

TEST_CASE("wiped credentials hold nothing") {
  BucketCredentials c{"AKID", "secret", "token", "key", "sas"};
  c.wipe();
  CHECK(c.anonymous());
  CHECK(c.secrets().empty());
  CHECK(c.access_key_id.empty());
}

TEST_CASE("a mount over a directory that holds the sandbox's own trees is refused") {
  auto error_of = [](const char* flag) {
    auto m = parse_mount_flag(flag);
    return m ? std::string() : m.error().message;
  };
  CHECK(error_of("s3://photos:/opt").find("would hide /opt/nsbox") != std::string::npos);
  CHECK(error_of("s3://photos:/mnt").find("would hide /mnt/files") != std::string::npos);
  CHECK(error_of("s3://photos:/home").find("would hide /home/user") != std::string::npos);
  CHECK(error_of("s3://photos:/home/user").find("would hide /home/user") != std::string::npos);
  CHECK(error_of("s3://photos:/tmp").find("would hide /tmp") != std::string::npos);
  CHECK(error_of("s3://photos:/").find("cannot be mounted over /") != std::string::npos);
  CHECK(error_of("s3://photos:/opt/nsbox/x").find("/opt/nsbox belongs to the sandbox") != std::string::npos);
  // Beside or inside them is fine.
  CHECK(error_of("s3://photos:/opt/data").empty());
  CHECK(error_of("s3://photos:/mnt/data").empty());
  CHECK(error_of("s3://photos:/tmp/data").empty());
  CHECK(error_of("s3://photos:/home/other").empty());
  CHECK(error_of("s3://photos:data").empty());  // /home/user/data
}

TEST_CASE("bucket mounts cannot share a path or nest, in any order") {
  CHECK(check_mount_paths({"/data", "/logs", "/home/user/memories"}));
  auto same = check_mount_paths({"/data", "/data/"});
  REQUIRE_FALSE(same);
  CHECK(same.error().message == "two mounts at /data");
  auto nested = check_mount_paths({"/data/inner", "/data"});
  REQUIRE_FALSE(nested);
  CHECK(nested.error().message.find("mount path /data/inner is inside the mount at /data") != std::string::npos);
  auto relative = check_mount_paths({"/home/user/m", "m/x"});
  REQUIRE_FALSE(relative);
  CHECK(relative.error().message.find("/home/user/m/x is inside the mount at /home/user/m") != std::string::npos);
  CHECK(check_mount_paths({"/data", "/database"}));  // a common prefix is not nesting
  CHECK_FALSE(check_mount_paths({"/data", "/opt"}));  // each is checked too
}

TEST_CASE("an endpoint is an http or https URL with a host and nothing that reaches another parser") {
  auto entry = [](const std::string& url) {
    return BucketMount::from_json({{"bucket", "bkt"}, {"mount_path", "/d"}, {"endpoint_url", url}});
  };
  CHECK(entry("http://127.0.0.1:9000"));
  CHECK(entry("https://s3.eu-west-1.amazonaws.com"));
  CHECK(entry("http://[::1]:9000/base"));
  for (const char* bad : {"file:///etc/passwd", "ftp://host", "gopher://h", "s3.amazonaws.com", "HTTP://h"}) {
    INFO(bad);
    auto m = entry(bad);
    REQUIRE_FALSE(m);
    CHECK(m.error().message.find("is not an http:// or https:// URL") != std::string::npos);
  }
  for (const char* bad : {"http://", "http:///path", "http://user:pw@host", "http://h,use_path_request_style",
                          "http://h\nendpoint = evil", "http://h?x=1", "http://h#f", "http://h x"}) {
    INFO(bad);
    CHECK_FALSE(entry(bad));
  }
  // One from the environment is checked as well.
  auto m = parse_mount_flag("s3://bkt:/d");
  REQUIRE(m);
  auto c = resolve(*m, {{"S3_ENDPOINT_URL", "file:///etc"}});
  REQUIRE_FALSE(c);
  CHECK(c.error().message.find("is not an http:// or https:// URL") != std::string::npos);
}

TEST_CASE("bucket, container, account and region names are checked, so none can inject into a host, URL or option list") {
  auto s3 = [](const std::string& bucket) { return BucketMount::from_json({{"bucket", bucket}, {"mount_path", "/d"}}); };
  for (const std::string& good : std::vector<std::string>{"abc", "my-bucket.logs", "Legacy_Bucket", "ro", std::string(255, 'a')}) {
    INFO(good);
    CHECK(s3(good));
  }
  for (const std::string& bad : std::vector<std::string>{std::string(256, 'a'), "-abc", "abc.", "a..b", "a,b,allow_other", "evil.com/x", "a b", "a:b",
                          "a\nb", "a@b", "a?b", "a%2f"}) {
    INFO(bad);
    auto m = s3(bad);
    REQUIRE_FALSE(m);
    CHECK(m.error().message.find("is not a valid s3 bucket name") != std::string::npos);
    CHECK(m.error().message.find('\n') == std::string::npos);
    CHECK(m.error().hint.find("3-63") != std::string::npos);
  }
  CHECK_FALSE(parse_mount_flag("gs://x_:/d"));

  auto az = [](const std::string& account, const std::string& container) {
    return BucketMount::from_json({{"type", "azure_blob"}, {"account", account}, {"container", container}, {"mount_path", "/d"}});
  };
  CHECK(az("devstoreaccount1", "my-container-1"));
  CHECK(az("abc", "c00"));
  for (auto [account, container] : std::vector<std::pair<std::string, std::string>>{
           {"acct", "Upper"}, {"acct", "a--b"}, {"acct", "-ab"}, {"acct", "ab"}, {"acct", "a_b_c"}, {"acct", "a.b.c"}}) {
    INFO(container);
    auto m = az(account, container);
    REQUIRE_FALSE(m);
    CHECK(m.error().message.find("is not a valid Azure container name") != std::string::npos);
  }
  for (const std::string& account : std::vector<std::string>{"ab", "UPPER", "evil.com", "a-b-c", std::string(25, 'a')}) {
    INFO(account);
    auto m = az(account, "container");
    REQUIRE_FALSE(m);
    CHECK(m.error().message.find("is not a valid Azure storage account name") != std::string::npos);
  }
  auto from_env = parse_mount_flag("azblob://acct/ctr0:/d");
  REQUIRE(from_env);
  from_env->account.clear();
  CHECK_FALSE(resolve(*from_env, {{"AZURE_STORAGE_ACCOUNT", "evil.com#"}}));

  auto r2 = parse_mount_flag("r2://b00:/d");
  REQUIRE(r2);
  auto r2c = resolve(*r2, {{"R2_ACCOUNT_ID", "abc.evil.com/"}});
  REQUIRE_FALSE(r2c);
  CHECK(r2c.error().message.find("is not a valid R2 account id") != std::string::npos);

  auto region = BucketMount::from_json({{"bucket", "bkt"}, {"mount_path", "/d"}, {"region", "us-east-1,allow_other"}});
  REQUIRE_FALSE(region);
  CHECK(region.error().message.find("is not a region name") != std::string::npos);
  auto env_region = parse_mount_flag("s3://bkt:/d");
  CHECK_FALSE(resolve(*env_region, {{"AWS_REGION", "x\ny"}}));
}

TEST_CASE("names AWS's virtual hosts cannot carry are addressed path-style there") {
  const std::vector<std::pair<std::string, bool>> cases = {
      {"plain-name", false}, {"with.dot", true}, {"Legacy_Name", true}, {std::string(64, 'a'), true}};
  for (const auto& [bucket, path_style] : cases) {
    INFO(bucket);
    auto m = BucketMount::from_json({{"bucket", bucket}, {"mount_path", "/d"}});
    REQUIRE(m);
    REQUIRE(resolve(*m, {}));
    CHECK(m->path_style == path_style);
  }
}

TEST_CASE("prefixes and credentials with characters the tools would misread are refused") {
  auto entry = [](const std::string& prefix, const std::string& strategy) {
    return BucketMount::from_json({{"bucket", "bkt"}, {"prefix", prefix}, {"mount_path", "/d"}, {"strategy", strategy}});
  };
  CHECK(entry("a,b", "builtin"));
  for (const char* tool : {"rclone", "s3fs"}) {
    auto m = entry("a,b", tool);
    REQUIRE_FALSE(m);
    CHECK(m.error().message.find("has a ','") != std::string::npos);
  }
  for (const char* strategy : {"builtin", "rclone"}) {
    auto m = entry("a\nb", strategy);
    REQUIRE_FALSE(m);
    CHECK(m.error().message.find("control character") != std::string::npos);
  }
  CHECK_FALSE(parse_mount_flag("s3://bkt:/da\nta"));

  auto m = parse_mount_flag("s3://bkt:/d");
  REQUIRE(m);
  auto c = resolve(*m, {{"AWS_ACCESS_KEY_ID", "AKID"}, {"AWS_SECRET_ACCESS_KEY", "line\n[evil]\ntype = local"}});
  REQUIRE_FALSE(c);
  CHECK(c.error().message.find("control character") != std::string::npos);
  CHECK(c.error().message.find("evil") == std::string::npos);
}
