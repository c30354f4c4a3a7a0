// Bucket mounts as a user or an agent framework gives them: a `--mount` flag, a manifest
// (JSON), and what they become: a mount resolved against an environment, and the command
// line, config file and options of rclone and s3fs. The input is the manifest text (also
// tried as a flag); a manifest's "env" object, which nsbox ignores, is the environment
// resolve() sees, so that the fuzzer can vary credentials too.
//
// Checks: a mount that is accepted has a plain absolute mount path, a prefix of plain
// segments ending in '/', a bucket, and the same fields after to_json/from_json; once
// resolved, rclone's config has one "key = value" line per setting (nothing a value could
// add) and s3fs's -o list only nsbox's options.
#include <cstdint>
#include <set>
#include <sstream>
#include <string>
#include <string_view>

#include "mounts/bucket/external_helpers.h"
#include "mounts/bucket/mount_spec.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using nsbox::bucket::BucketMount;

bool has_control(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return true;
  return false;
}

bool plain_segments(std::string_view path) {  // "a/b/c": no empty, '.' or '..' segment
  std::stringstream parts{std::string(path)};
  for (std::string part; std::getline(parts, part, '/');)
    if (part.empty() || part == "." || part == "..") return false;
  return true;
}

void check_accepted(const BucketMount& m) {
  FUZZ_CHECK(m.mount_path.size() > 1 && m.mount_path.front() == '/' && m.mount_path.back() != '/');
  FUZZ_CHECK(!has_control(m.mount_path) && plain_segments(m.mount_path.substr(1)));
  FUZZ_CHECK(m.prefix.empty() || (m.prefix.back() == '/' && plain_segments(m.prefix.substr(0, m.prefix.size() - 1))));
  FUZZ_CHECK(!has_control(m.prefix));
  FUZZ_CHECK(!m.bucket.empty() && !has_control(m.bucket) && m.bucket.find('/') == std::string::npos);
  FUZZ_CHECK(nsbox::bucket::check_mount_paths({m.mount_path}).has_value());
  auto again = BucketMount::from_json(m.to_json());
  FUZZ_CHECK(again.has_value());
  FUZZ_CHECK(again->to_json() == m.to_json());
  (void)m.describe();
}

void check_rclone_config(const std::string& text) {
  static const std::set<std::string> kKeys = {"type", "account", "key", "sas_url", "endpoint", "provider", "env_auth",
                                              "access_key_id", "secret_access_key", "session_token", "region",
                                              "force_path_style"};
  std::stringstream lines(text);
  std::string line;
  FUZZ_CHECK(std::getline(lines, line) && line == "[bucket]");
  std::set<std::string> seen;
  while (std::getline(lines, line)) {
    auto eq = line.find(" = ");
    FUZZ_CHECK(eq != std::string::npos);
    std::string key = line.substr(0, eq);
    FUZZ_CHECK(kKeys.contains(key));
    FUZZ_CHECK(seen.insert(key).second);
    FUZZ_CHECK(!has_control(line));
  }
}

void check_s3fs_options(const std::string& options) {
  static const std::set<std::string> kOptions = {"url", "endpoint", "allow_other", "uid", "gid", "umask", "mp_umask",
                                                 "tmpdir", "ensure_diskfree", "use_path_request_style", "ro",
                                                 "public_bucket", "passwd_file"};
  std::set<std::string> seen;
  std::string option;
  auto take = [&] {
    std::string name = option.substr(0, option.find('='));
    FUZZ_CHECK(kOptions.contains(name));
    FUZZ_CHECK(seen.insert(name).second);
    option.clear();
  };
  for (size_t i = 0; i < options.size(); ++i) {  // fuse_opt's split: ',' unless after '\'
    if (options[i] == '\\' && i + 1 < options.size()) option += options[++i];
    else if (options[i] == ',') take();
    else option += options[i];
  }
  take();
  FUZZ_CHECK(!has_control(options));
}

void check_helpers(BucketMount m, const nsbox::bucket::Environment& env) {
  if (!m.credentials_file.empty()) return;  // resolve() would read that file
  auto credentials = nsbox::bucket::resolve(m, env);
  if (!credentials) return;
  check_accepted(m);
  nsbox::bucket::HelperPaths paths{"/run/nsbox/m", "/run/nsbox/s", "/var/cache/nsbox,x", 1000, 1000, 1 << 30, 1 << 30};
  for (auto strategy : {nsbox::bucket::MountStrategy::kRclone, nsbox::bucket::MountStrategy::kS3fs}) {
    m.strategy = strategy;
    auto command = nsbox::bucket::helper_command("/usr/bin/helper", m, *credentials, paths);
    if (!command) continue;
    for (const auto& arg : command->argv) FUZZ_CHECK(!has_control(arg));
    if (strategy == nsbox::bucket::MountStrategy::kRclone) {
      FUZZ_CHECK(command->secret_files.size() == 1);
      check_rclone_config(command->secret_files[0].second);
    } else {
      FUZZ_CHECK(command->argv.size() >= 2 && command->argv[command->argv.size() - 2] == "-o");
      check_s3fs_options(command->argv.back());
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);

  if (auto flag = nsbox::bucket::parse_mount_flag(text)) {
    check_accepted(*flag);
    check_helpers(*flag, {});
  }

  auto mounts = nsbox::bucket::parse_manifest(text, "fuzz.json");
  if (!mounts) return 0;
  nsbox::bucket::Environment env;
  nlohmann::json doc = nsbox::fuzz::parse_json(text);
  if (doc.is_object() && doc.contains("env") && doc["env"].is_object())
    for (const auto& [k, v] : doc["env"].items())
      if (v.is_string()) env.emplace_back(k, v.get<std::string>());
  std::vector<std::string> paths;
  for (const auto& m : *mounts) {
    check_accepted(m);
    check_helpers(m, env);
    paths.push_back(m.mount_path);
  }
  (void)nsbox::bucket::check_mount_paths(paths);
  return 0;
}
