#include "mounts/bucket/external_helpers.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

namespace nsbox::bucket {
namespace {

// A minimal environment: nothing of the caller's (AWS_CA_BUNDLE, set machine-wide on some
// hosts, breaks rclone's S3 backend; AWS_* secrets must not reach a helper's environ).
const std::vector<std::string> kEnvironment = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/nonexistent"};

std::string s3_provider(BucketKind kind) {
  switch (kind) {
    case BucketKind::kR2: return "Cloudflare";
    case BucketKind::kGcs: return "GCS";
    default: return "Other";
  }
}

// A value in a FUSE -o list: fuse_opt splits on ',' unless escaped with '\\'.
std::string fuse_option_value(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == ',' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// rclone's sizes: a bare number means KiB to it; "M" is MiB. At least 1 MiB: 0 would
// mean no bound.
std::string rclone_size(uint64_t bytes) { return std::to_string(std::max<uint64_t>(bytes >> 20, 1)) + "M"; }

std::string remote_path(const BucketMount& m) {
  std::string prefix = m.prefix;
  if (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  return m.bucket + (prefix.empty() ? "" : "/" + prefix);
}

HelperCommand rclone(const std::string& program, const BucketMount& m, const BucketCredentials& c, const HelperPaths& p) {
  std::string config = p.secrets_dir + "/rclone.conf";
  std::string text = "[bucket]\n";
  if (m.kind == BucketKind::kAzureBlob) {
    text += "type = azureblob\naccount = " + m.account + "\n";
    if (!c.azure_key.empty()) text += "key = " + c.azure_key + "\n";
    if (!c.azure_sas.empty()) text += "sas_url = " + m.endpoint_url + "/" + m.bucket + "?" + c.azure_sas + "\n";
    if (!m.endpoint_url.empty()) text += "endpoint = " + m.endpoint_url + "\n";
  } else {
    text += "type = s3\nprovider = " + s3_provider(m.kind) + "\nenv_auth = false\n";
    if (!c.access_key_id.empty())
      text += "access_key_id = " + c.access_key_id + "\nsecret_access_key = " + c.secret_access_key + "\n";
    if (!c.session_token.empty()) text += "session_token = " + c.session_token + "\n";
    text += "endpoint = " + m.endpoint_url + "\nregion = " + m.region + "\n";
    text += std::string("force_path_style = ") + (m.path_style ? "true" : "false") + "\n";
  }
  HelperCommand cmd{program, {"rclone", "mount", "bucket:" + remote_path(m), p.mountpoint, "--config", config,
                              "--cache-dir", p.cache_dir, "--allow-other", "--uid", std::to_string(p.uid), "--gid",
                              std::to_string(p.gid), "--umask", "022", "--dir-cache-time", "1s", "--attr-timeout", "1s",
                              // Written files go up right after close (rclone's close does not wait for it).
                              "--vfs-cache-mode", "writes", "--vfs-write-back", "0s",
                              // Debian's rclone (1.60) has no --vfs-cache-min-free-space to bound it by;
                              // the mount's staging budget caps it too (softly: rclone keeps open files).
                              "--vfs-cache-max-size", rclone_size(std::min(p.cache_max_bytes, m.staging_bytes))},
                    {{config, text}}, kEnvironment};
  if (m.read_only) cmd.argv.push_back("--read-only");
  return cmd;
}

HelperCommand s3fs(const std::string& program, const BucketMount& m, const BucketCredentials& c, const HelperPaths& p) {
  std::string prefix = m.prefix;
  if (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  std::string options = "url=" + m.endpoint_url + ",endpoint=" + m.region + ",allow_other,uid=" + std::to_string(p.uid) +
                        ",gid=" + std::to_string(p.gid) + ",umask=022,mp_umask=022" +
                        // Its temporary files in the sandbox's cache dir, and the staging
                        // disk's reserve left free (s3fs answers ENOSPC past it).
                        ",tmpdir=" + fuse_option_value(p.cache_dir) +
                        ",ensure_diskfree=" + std::to_string(std::max<uint64_t>(p.disk_reserve_bytes >> 20, 1));
  if (m.path_style) options += ",use_path_request_style";
  if (m.read_only) options += ",ro";
  HelperCommand cmd{program, {"s3fs", m.bucket + (prefix.empty() ? "" : ":/" + prefix), p.mountpoint, "-f"}, {}, kEnvironment};
  if (c.access_key_id.empty()) {
    options += ",public_bucket=1";
  } else {
    std::string passwd = p.secrets_dir + "/passwd-s3fs";
    cmd.secret_files.emplace_back(passwd, c.access_key_id + ":" + c.secret_access_key + "\n");
    options += ",passwd_file=" + fuse_option_value(passwd);
    // s3fs reads a session token from its environment only: the one secret that has to go there.
    if (!c.session_token.empty()) cmd.environment.push_back("AWSSESSIONTOKEN=" + c.session_token);
  }
  cmd.argv.insert(cmd.argv.end(), {"-o", options});
  return cmd;
}

}  // namespace

bool is_proxy_setting(std::string_view entry) {
  for (std::string_view name : {"http_proxy=", "https_proxy=", "HTTPS_PROXY=", "all_proxy=", "ALL_PROXY=", "no_proxy=", "NO_PROXY="})
    if (entry.starts_with(name)) return true;
  return false;
}

std::vector<std::string> proxy_settings(char** environment) {
  std::vector<std::string> kept;
  for (char** e = environment; e && *e; ++e)
    if (is_proxy_setting(*e)) kept.emplace_back(*e);
  return kept;
}

// Along the PATH of the nsbox command (the supervisor inherits it), as a shell would.
Result<std::string> find_helper(MountStrategy strategy) {
  std::string name(strategy_name(strategy));
  const char* env_path = std::getenv("PATH");
  std::string search = env_path && *env_path ? env_path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= search.size()) {
    size_t end = search.find(':', start);
    if (end == std::string::npos) end = search.size();
    std::string dir = search.substr(start, end - start);
    std::string path = (dir.empty() ? "." : dir) + "/" + name;
    if (!dir.empty() && dir.front() == '/' && ::access(path.c_str(), X_OK) == 0) return path;
    start = end + 1;
  }
  return fail(make_error(ErrorCode::kUnsupported, "mount tool missing: " + name + " is not installed",
                         "install the Debian package " + name + " (apt-get install " + name + ")"));
}

Result<HelperCommand> helper_command(const std::string& program, const BucketMount& mount,
                                     const BucketCredentials& credentials, const HelperPaths& paths) {
  if (mount.strategy != MountStrategy::kRclone && mount.kind == BucketKind::kAzureBlob)
    return fail(make_error(ErrorCode::kInvalidArgument, "s3fs cannot mount Azure Blob containers", "use builtin or rclone"));
  HelperCommand cmd = mount.strategy == MountStrategy::kRclone ? rclone(program, mount, credentials, paths)
                                                                : s3fs(program, mount, credentials, paths);
  for (auto& setting : proxy_settings(environ)) cmd.environment.push_back(std::move(setting));
  return cmd;
}

}  // namespace nsbox::bucket
