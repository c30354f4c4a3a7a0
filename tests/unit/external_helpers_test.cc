// The rclone and s3fs command lines nsbox builds: the secrets in files, never in argv or
// the environment's AWS names; a missing tool named with its package. (Whether the tools
// are installed does not matter here: the integration tests run them.)
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <set>
#include <utility>

#include "mounts/bucket/external_helpers.h"

using namespace nsbox::bucket;

namespace {

std::string joined(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) out += a + " ";
  return out;
}

// s3fs's -o list, option by option (an escaped "\," inside a value does not split it).
std::set<std::string> s3fs_options(const HelperCommand& cmd) {
  std::set<std::string> options;
  std::string current;
  const std::string& list = cmd.argv.back();
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i] == '\\' && i + 1 < list.size()) {
      current += list.substr(i, 2);
      ++i;
    } else if (list[i] == ',') {
      options.insert(std::exchange(current, {}));
    } else {
      current += list[i];
    }
  }
  options.insert(current);
  return options;
}

struct PathOverride {
  explicit PathOverride(const char* value) : saved(std::getenv("PATH") ? std::getenv("PATH") : "") { ::setenv("PATH", value, 1); }
  ~PathOverride() { ::setenv("PATH", saved.c_str(), 1); }
  std::string saved;
};

}  // namespace

TEST_CASE("rclone gets its keys in a config file and the mount's options on its command line") {
  auto m = BucketMount::from_json({{"bucket", "b"}, {"prefix", "p/q"}, {"mount_path", "/data"}, {"strategy", "rclone"},
                                   {"endpoint_url", "http://127.0.0.1:9000"}, {"region", "us-east-1"}});
  REQUIRE(m);
  BucketCredentials c{"AKID", "the-secret", "the-token", "", ""};
  auto cmd = helper_command("/usr/bin/rclone", *m, c, {"/mnt/x", "/run/s", "/var/cache/x", 1000, 1000});
  REQUIRE(cmd);
  std::string argv = joined(cmd->argv);
  CHECK(argv.find("rclone mount bucket:b/p/q /mnt/x --config /run/s/rclone.conf") == 0);
  CHECK(argv.find("--read-only") != std::string::npos);
  CHECK(argv.find("--uid 1000 --gid 1000") != std::string::npos);
  CHECK(argv.find("the-secret") == std::string::npos);
  REQUIRE(cmd->secret_files.size() == 1);
  const std::string& config = cmd->secret_files[0].second;
  CHECK(config.find("secret_access_key = the-secret\n") != std::string::npos);
  CHECK(config.find("session_token = the-token\n") != std::string::npos);
  CHECK(config.find("force_path_style = true\n") != std::string::npos);
  for (const auto& e : cmd->environment) CHECK(e.rfind("AWS_", 0) != 0);
}

TEST_CASE("s3fs gets a passwd file, or public_bucket when anonymous, and cannot mount Azure") {
  auto m = BucketMount::from_json({{"bucket", "b"}, {"mount_path", "/data"}, {"strategy", "s3fs"}, {"read_only", false},
                                   {"endpoint_url", "http://127.0.0.1:9000"}, {"region", "us-east-1"}});
  REQUIRE(m);
  auto cmd = helper_command("/usr/bin/s3fs", *m, {"AKID", "the-secret", "", "", ""}, {"/mnt/x", "/run/s", "/var/cache/x", 0, 0});
  REQUIRE(cmd);
  std::string argv = joined(cmd->argv);
  CHECK(argv.find("s3fs b /mnt/x -f -o url=http://127.0.0.1:9000,") == 0);
  CHECK(argv.find("passwd_file=/run/s/passwd-s3fs") != std::string::npos);
  REQUIRE(cmd->argv[cmd->argv.size() - 2] == "-o");
  CHECK(s3fs_options(*cmd).count("allow_other"));
  CHECK_FALSE(s3fs_options(*cmd).count("ro"));  // read_only: false
  CHECK(argv.find("the-secret") == std::string::npos);
  REQUIRE(cmd->secret_files.size() == 1);
  CHECK(cmd->secret_files[0].second == "AKID:the-secret\n");

  auto anonymous = helper_command("/usr/bin/s3fs", *m, {}, {"/mnt/x", "/run/s", "/var/cache/x", 0, 0});
  REQUIRE(anonymous);
  CHECK(joined(anonymous->argv).find("public_bucket=1") != std::string::npos);
  CHECK(anonymous->secret_files.empty());

  auto az = BucketMount::from_json({{"type", "azure_blob"}, {"account", "a"}, {"container", "c"}, {"mount_path", "/d"},
                                    {"strategy", "s3fs"}});
  REQUIRE_FALSE(az);
  CHECK(az.error().message.find("s3fs cannot mount Azure Blob") != std::string::npos);
}

TEST_CASE("a read-only mount is read-only to each tool: s3fs gets ro, rclone --read-only") {
  // Mounts are read-only unless asked (read_only defaults to true).
  for (const char* strategy : {"s3fs", "rclone"}) {
    INFO(strategy);
    auto ro = BucketMount::from_json({{"bucket", "b"}, {"mount_path", "/data"}, {"strategy", strategy},
                                      {"endpoint_url", "http://127.0.0.1:9000"}, {"region", "us-east-1"}});
    REQUIRE(ro);
    REQUIRE(ro->read_only);
    auto rw = *ro;
    rw.read_only = false;
    std::string program = std::string("/usr/bin/") + strategy;
    HelperPaths paths{"/mnt/x", "/run/s", "/var/cache/x", 1000, 1000};
    auto ro_cmd = helper_command(program, *ro, {"AKID", "s", "", "", ""}, paths);
    auto rw_cmd = helper_command(program, rw, {"AKID", "s", "", "", ""}, paths);
    REQUIRE(ro_cmd);
    REQUIRE(rw_cmd);
    if (std::string(strategy) == "s3fs") {
      CHECK(s3fs_options(*ro_cmd).count("ro"));
      CHECK_FALSE(s3fs_options(*rw_cmd).count("ro"));
    } else {
      auto has = [](const HelperCommand& c) { return std::find(c.argv.begin(), c.argv.end(), "--read-only") != c.argv.end(); };
      CHECK(has(*ro_cmd));
      CHECK_FALSE(has(*rw_cmd));
    }
  }
}

TEST_CASE("a missing mount tool is an error that names the package") {
  PathOverride path("/nonexistent-nsbox-test-dir");
  auto rclone = find_helper(MountStrategy::kRclone);
  REQUIRE_FALSE(rclone);
  CHECK(rclone.error().message == "mount tool missing: rclone is not installed");
  CHECK(rclone.error().hint.find("apt-get install rclone") != std::string::npos);
  auto s3fs = find_helper(MountStrategy::kS3fs);
  REQUIRE_FALSE(s3fs);
  CHECK(s3fs.error().message == "mount tool missing: s3fs is not installed");
}

TEST_CASE("rclone's cache and s3fs's temporary files are bounded on the staging disk") {
  auto rclone_mount = BucketMount::from_json({{"bucket", "b"}, {"mount_path", "/data"}, {"strategy", "rclone"},
                                              {"endpoint_url", "http://127.0.0.1:9000"}, {"region", "us-east-1"}});
  REQUIRE(rclone_mount);
  HelperPaths paths{"/mnt/x", "/run/s", "/var/lib/nsbox/staging/sbx-1-0", 1000, 1000};
  paths.cache_max_bytes = 5ull << 30;
  paths.disk_reserve_bytes = 1ull << 30;
  auto rclone = helper_command("/usr/bin/rclone", *rclone_mount, {}, paths);
  REQUIRE(rclone);
  std::string argv = joined(rclone->argv);
  CHECK(argv.find("--cache-dir /var/lib/nsbox/staging/sbx-1-0 ") != std::string::npos);
  CHECK(argv.find("--vfs-cache-max-size 5120M") != std::string::npos);  // MiB: a bare number would be KiB to rclone
  // A disk already past its reserve: the smallest bound, not 0 (which rclone reads as none).
  paths.cache_max_bytes = 0;
  CHECK(joined(helper_command("/usr/bin/rclone", *rclone_mount, {}, paths)->argv).find("--vfs-cache-max-size 1M") !=
        std::string::npos);

  auto s3fs_mount = BucketMount::from_json({{"bucket", "b"}, {"mount_path", "/data"}, {"strategy", "s3fs"},
                                            {"endpoint_url", "http://127.0.0.1:9000"}, {"region", "us-east-1"}});
  REQUIRE(s3fs_mount);
  paths.disk_reserve_bytes = 3ull << 30;
  auto s3fs = helper_command("/usr/bin/s3fs", *s3fs_mount, {"AKID", "the-secret", "", "", ""}, paths);
  REQUIRE(s3fs);
  argv = joined(s3fs->argv);
  CHECK(argv.find(",tmpdir=/var/lib/nsbox/staging/sbx-1-0,") != std::string::npos);
  CHECK(argv.find(",ensure_diskfree=3072") != std::string::npos);  // MB
}

TEST_CASE("a path with a ',' cannot add options to s3fs's -o list: it is escaped") {
  auto m = BucketMount::from_json({{"bucket", "b"}, {"mount_path", "/data"}, {"strategy", "s3fs"},
                                   {"endpoint_url", "http://127.0.0.1:9000"}, {"region", "us-east-1"}});
  REQUIRE(m);
  auto cmd = helper_command("/usr/bin/s3fs", *m, {"AKID", "s", "", "", ""},
                            {"/mnt/x", "/run/a,allow_root", "/data/x,y\\z", 0, 0});
  REQUIRE(cmd);
  const std::string& options = cmd->argv.back();
  CHECK(options.find(",passwd_file=/run/a\\,allow_root/passwd-s3fs") != std::string::npos);
  CHECK(options.find(",tmpdir=/data/x\\,y\\\\z,") != std::string::npos);
  CHECK(options.find(",allow_root") == options.find("\\,allow_root") + 1);  // only the escaped one
}

TEST_CASE("the helpers get the proxy settings of the environment, and nothing else of it") {
  struct Set {  // for the test, then as it was
    Set(const char* name, const char* value) : name(name), had(std::getenv(name) != nullptr) {
      if (had) saved = std::getenv(name);
      ::setenv(name, value, 1);
    }
    ~Set() { had ? (void)::setenv(name, saved.c_str(), 1) : (void)::unsetenv(name); }
    const char* name;
    bool had;
    std::string saved;
  };
  Set http("http_proxy", "http://proxy.example:3128"), no("NO_PROXY", "localhost,127.0.0.1"),
      cgi("HTTP_PROXY", "http://set-by-a-request-header"), other("AWS_CA_BUNDLE", "/etc/ssl/bundle.pem");
  CHECK(is_proxy_setting("https_proxy=http://p:1"));
  CHECK(is_proxy_setting("ALL_PROXY=socks5://p:1"));
  CHECK_FALSE(is_proxy_setting("HTTP_PROXY=http://p:1"));
  CHECK_FALSE(is_proxy_setting("http_proxy_extra=1"));
  for (const char* strategy : {"rclone", "s3fs"}) {
    INFO(strategy);
    auto m = BucketMount::from_json({{"bucket", "b"}, {"mount_path", "/data"}, {"strategy", strategy}});
    REQUIRE(m);
    auto cmd = helper_command(std::string("/usr/bin/") + strategy, *m, {}, {"/mnt/x", "/run/s", "/var/cache/x", 0, 0});
    REQUIRE(cmd);
    std::string env = joined(cmd->environment);
    CHECK(env.find("http_proxy=http://proxy.example:3128 ") != std::string::npos);
    CHECK(env.find("NO_PROXY=localhost,127.0.0.1 ") != std::string::npos);
    CHECK(env.find("HTTP_PROXY") == std::string::npos);
    CHECK(env.find("AWS_CA_BUNDLE") == std::string::npos);
  }
}
