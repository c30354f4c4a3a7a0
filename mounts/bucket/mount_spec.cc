#include "mounts/bucket/mount_spec.h"

#include <fstream>
#include <sstream>

namespace nsbox::bucket {
namespace {

using nlohmann::json;

constexpr std::pair<BucketKind, std::string_view> kKinds[] = {
    {BucketKind::kS3, "s3"}, {BucketKind::kR2, "r2"}, {BucketKind::kGcs, "gcs"}, {BucketKind::kAzureBlob, "azure_blob"}};
constexpr std::pair<MountStrategy, std::string_view> kStrategies[] = {
    {MountStrategy::kBuiltin, "builtin"}, {MountStrategy::kRclone, "rclone"}, {MountStrategy::kS3fs, "s3fs"}};

// Where the sandbox's own trees are: a bucket may not be mounted over or inside them.
constexpr std::string_view kReservedPaths[] = {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
                                               "/dev", "/proc", "/sys", "/opt/nsbox", "/mnt/files"};

Error invalid(std::string message, std::string hint = {}) {
  return make_error(ErrorCode::kInvalidArgument, std::move(message), std::move(hint));
}

bool is_under(std::string_view path, std::string_view dir) {
  return path == dir || (path.starts_with(dir) && path.size() > dir.size() && path[dir.size()] == '/');
}

// Absolute, normalised, not '/', not in a reserved tree; relative paths are under /home/user.
Result<std::string> check_mount_path(std::string path) {
  if (path.empty()) return fail(invalid("a bucket mount needs a mount path"));
  if (path.front() != '/') path = "/home/user/" + path;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  std::stringstream parts(path.substr(1));
  std::string part;
  while (std::getline(parts, part, '/'))
    if (part.empty() || part == "." || part == "..")
      return fail(invalid("mount path '" + path + "' is not a plain absolute path (no '.', '..' or '//')"));
  if (path == "/" || path == "/home" || path == "/home/user" || path == "/tmp" || path == "/mnt")
    return fail(invalid("a bucket cannot be mounted over " + path, "mount it at a directory of its own, e.g. /data"));
  for (auto reserved : kReservedPaths)
    if (is_under(path, reserved)) return fail(invalid("a bucket cannot be mounted at " + path + ": " + std::string(reserved) + " belongs to the sandbox"));
  return path;
}

std::string normalise_prefix(std::string prefix) {
  while (!prefix.empty() && prefix.front() == '/') prefix.erase(0, 1);
  if (!prefix.empty() && prefix.back() != '/') prefix += '/';
  return prefix;
}

Result<void> check_prefix(const std::string& prefix) {
  std::stringstream parts(prefix);
  std::string part;
  while (std::getline(parts, part, '/'))
    if (part.empty() || part == "." || part == "..")
      return fail(invalid("bucket prefix '" + prefix + "' has an empty, '.' or '..' segment"));
  return {};
}

std::string env_value(const Environment& env, std::initializer_list<std::string_view> names) {
  for (auto name : names)
    for (const auto& [k, v] : env)
      if (k == name && !v.empty()) return v;
  return {};
}

Result<Environment> read_credentials_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return fail(make_error(ErrorCode::kNotFound, "cannot read the credentials file " + path));
  Environment env;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line.starts_with("export ")) line.erase(0, 7);
    auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string value = line.substr(eq + 1);
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') && value.back() == value.front())
      value = value.substr(1, value.size() - 2);
    env.emplace_back(line.substr(0, eq), value);
  }
  return env;
}

}  // namespace

std::string_view kind_name(BucketKind kind) {
  for (const auto& [k, name] : kKinds)
    if (k == kind) return name;
  return "s3";
}

std::string_view strategy_name(MountStrategy strategy) {
  for (const auto& [s, name] : kStrategies)
    if (s == strategy) return name;
  return "builtin";
}

std::string BucketMount::source() const {
  switch (kind) {
    case BucketKind::kS3: return "s3://" + bucket + "/" + prefix;
    case BucketKind::kR2: return "r2://" + bucket + "/" + prefix;
    case BucketKind::kGcs: return "gs://" + bucket + "/" + prefix;
    case BucketKind::kAzureBlob: return "azblob://" + account + "/" + bucket + "/" + prefix;
  }
  return bucket;
}

std::string BucketMount::describe() const {
  return source() + " at " + mount_path + (read_only ? " (read-only)" : " (read-write)");
}

json BucketMount::to_json() const {
  json j = {{"type", kind_name(kind)}, {"bucket", bucket},       {"prefix", prefix},
            {"region", region},        {"endpoint_url", endpoint_url}, {"path_style", path_style},
            {"mount_path", mount_path}, {"read_only", read_only},  {"strategy", strategy_name(strategy)}};
  if (!account.empty()) j["account"] = account;
  if (!credentials_file.empty()) j["credentials_file"] = credentials_file;
  return j;
}

Result<BucketMount> BucketMount::from_json(const json& j) {
  if (!j.is_object()) return fail(invalid("a mount entry must be a JSON object"));
  BucketMount m;
  try {
    std::string type = j.value("type", "s3");
    bool known = false;
    for (const auto& [k, name] : kKinds)
      if (name == type) m.kind = k, known = true;
    if (type == "azure" || type == "azblob") m.kind = BucketKind::kAzureBlob, known = true;
    if (type == "gs") m.kind = BucketKind::kGcs, known = true;
    if (!known) return fail(invalid("unknown mount type '" + type + "'", "use s3, r2, gcs or azure_blob"));
    m.bucket = j.contains("container") ? j["container"].get<std::string>() : j.value("bucket", "");
    m.account = j.value("account", "");
    if (m.kind == BucketKind::kR2 && m.account.empty()) m.account = j.value("account_id", "");
    m.prefix = normalise_prefix(j.value("prefix", ""));
    m.region = j.value("region", "");
    m.endpoint_url = j.value("endpoint_url", "");
    m.path_style = j.value("path_style", true);
    m.read_only = j.value("read_only", true);
    m.credentials_file = j.value("credentials_file", "");
    std::string strategy = j.value("strategy", "builtin");
    known = false;
    for (const auto& [s, name] : kStrategies)
      if (name == strategy) m.strategy = s, known = true;
    if (!known) return fail(invalid("unknown mount strategy '" + strategy + "'", "use builtin, rclone or s3fs"));
    m.mount_path = NSBOX_TRY(check_mount_path(j.value("mount_path", "")));
  } catch (const json::exception& e) {
    return fail(invalid(std::string("a mount entry has a field of the wrong type: ") + e.what()));
  }
  if (m.bucket.empty()) return fail(invalid("a " + std::string(kind_name(m.kind)) + " mount needs a bucket"));
  if (m.kind == BucketKind::kAzureBlob && m.account.empty() && m.endpoint_url.empty())
    return fail(invalid("an azure_blob mount needs an account"));
  NSBOX_CHECK(check_prefix(m.prefix));
  if (m.strategy == MountStrategy::kS3fs && m.kind == BucketKind::kAzureBlob)
    return fail(invalid("s3fs cannot mount Azure Blob containers", "use the builtin or rclone strategy"));
  return m;
}

Result<BucketMount> parse_mount_flag(std::string_view flag) {
  auto scheme_end = flag.find("://");
  if (scheme_end == std::string_view::npos)
    return fail(invalid("mount '" + std::string(flag) + "' has no scheme", "write s3://BUCKET[/PREFIX]:/PATH[:rw]"));
  std::string scheme(flag.substr(0, scheme_end));
  std::string_view rest = flag.substr(scheme_end + 3);
  auto colon = rest.find(':');
  if (colon == std::string_view::npos)
    return fail(invalid("mount '" + std::string(flag) + "' has no mount path", "write " + scheme + "://BUCKET[/PREFIX]:/PATH[:rw]"));
  std::string source(rest.substr(0, colon));
  std::string target(rest.substr(colon + 1));
  bool read_only = true;
  if (target.ends_with(":rw")) read_only = false, target.resize(target.size() - 3);
  else if (target.ends_with(":ro")) target.resize(target.size() - 3);

  json j = {{"mount_path", target}, {"read_only", read_only}};
  auto slash = source.find('/');
  std::string first = source.substr(0, slash);
  std::string after = slash == std::string::npos ? "" : source.substr(slash + 1);
  if (scheme == "s3" || scheme == "r2" || scheme == "gs" || scheme == "gcs") {
    j["type"] = scheme == "s3" ? "s3" : scheme == "r2" ? "r2" : "gcs";
    j["bucket"] = first;
    j["prefix"] = after;
  } else if (scheme == "azblob" || scheme == "az") {
    auto slash2 = after.find('/');
    j["type"] = "azure_blob";
    j["account"] = first;
    j["container"] = after.substr(0, slash2);
    j["prefix"] = slash2 == std::string::npos ? "" : after.substr(slash2 + 1);
  } else {
    return fail(invalid("unknown mount scheme '" + scheme + "://'", "use s3://, r2://, gs:// or azblob://"));
  }
  auto m = BucketMount::from_json(j);
  if (!m) return fail(std::move(m.error()).context("--mount " + std::string(flag)));
  return m;
}

Result<std::vector<BucketMount>> parse_manifest(std::string_view text, std::string_view source_name) {
  json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded()) return fail(invalid("manifest " + std::string(source_name) + " is not valid JSON"));
  if (doc.is_object() && doc.contains("mounts")) doc = doc["mounts"];
  if (!doc.is_array()) return fail(invalid("manifest " + std::string(source_name) + " must be a list of mounts"));
  std::vector<BucketMount> mounts;
  for (size_t i = 0; i < doc.size(); ++i) {
    auto m = BucketMount::from_json(doc[i]);
    if (!m) return fail(std::move(m.error()).context("manifest " + std::string(source_name) + ", entry " + std::to_string(i + 1)));
    mounts.push_back(std::move(*m));
  }
  return mounts;
}

Result<BucketCredentials> resolve(BucketMount& mount, const Environment& process_env) {
  Environment file_env;
  if (!mount.credentials_file.empty()) file_env = NSBOX_TRY(read_credentials_file(mount.credentials_file));
  const Environment& env = mount.credentials_file.empty() ? process_env : file_env;
  BucketCredentials c;
  switch (mount.kind) {
    case BucketKind::kS3:
      c.access_key_id = env_value(env, {"AWS_ACCESS_KEY_ID"});
      c.secret_access_key = env_value(env, {"AWS_SECRET_ACCESS_KEY"});
      c.session_token = env_value(env, {"AWS_SESSION_TOKEN"});
      if (mount.region.empty()) mount.region = env_value(process_env, {"AWS_REGION", "AWS_DEFAULT_REGION"});
      if (mount.region.empty()) mount.region = "us-east-1";
      if (mount.endpoint_url.empty()) mount.endpoint_url = env_value(process_env, {"S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"});
      if (mount.endpoint_url.empty()) {
        mount.endpoint_url = "https://s3." + mount.region + ".amazonaws.com";
        // AWS's own endpoint: virtual-host style, except for names TLS cannot carry.
        mount.path_style = mount.bucket.find('.') != std::string::npos;
      }
      break;
    case BucketKind::kR2:
      c.access_key_id = env_value(env, {"R2_ACCESS_KEY_ID", "AWS_ACCESS_KEY_ID"});
      c.secret_access_key = env_value(env, {"R2_SECRET_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY"});
      if (mount.account.empty()) mount.account = env_value(process_env, {"R2_ACCOUNT_ID", "CLOUDFLARE_ACCOUNT_ID"});
      if (mount.region.empty()) mount.region = "auto";
      if (mount.endpoint_url.empty()) {
        if (mount.account.empty())
          return fail(invalid("r2 mount " + mount.source() + " needs an account id", "set R2_ACCOUNT_ID or the entry's account"));
        mount.endpoint_url = "https://" + mount.account + ".r2.cloudflarestorage.com";
      }
      break;
    case BucketKind::kGcs:
      c.access_key_id = env_value(env, {"GCS_HMAC_ACCESS_ID", "GOOGLE_HMAC_ACCESS_ID", "AWS_ACCESS_KEY_ID"});
      c.secret_access_key = env_value(env, {"GCS_HMAC_SECRET", "GOOGLE_HMAC_SECRET", "AWS_SECRET_ACCESS_KEY"});
      if (mount.region.empty()) mount.region = "auto";
      if (mount.endpoint_url.empty()) mount.endpoint_url = "https://storage.googleapis.com";
      break;
    case BucketKind::kAzureBlob:
      c.azure_key = env_value(env, {"AZURE_STORAGE_KEY", "AZURE_STORAGE_ACCESS_KEY"});
      c.azure_sas = env_value(env, {"AZURE_STORAGE_SAS_TOKEN"});
      if (!c.azure_sas.empty() && c.azure_sas.front() == '?') c.azure_sas.erase(0, 1);
      if (mount.account.empty()) mount.account = env_value(process_env, {"AZURE_STORAGE_ACCOUNT"});
      if (mount.endpoint_url.empty()) mount.endpoint_url = env_value(process_env, {"AZURE_STORAGE_BLOB_ENDPOINT"});
      if (mount.endpoint_url.empty()) {
        if (mount.account.empty())
          return fail(invalid("azure_blob mount " + mount.source() + " needs an account", "set AZURE_STORAGE_ACCOUNT"));
        mount.endpoint_url = "https://" + mount.account + ".blob.core.windows.net";
      }
      break;
  }
  while (!mount.endpoint_url.empty() && mount.endpoint_url.back() == '/') mount.endpoint_url.pop_back();
  if (c.access_key_id.empty() != c.secret_access_key.empty())
    return fail(invalid(mount.source() + ": an access key id without its secret, or a secret without its id",
                        "set both, or neither for anonymous access"));
  return c;
}

std::vector<std::string> BucketCredentials::secrets() const {
  std::vector<std::string> out;
  for (const auto* s : {&secret_access_key, &session_token, &azure_key, &azure_sas})
    if (!s->empty()) out.push_back(*s);
  return out;
}

json BucketCredentials::to_json() const {
  return {{"access_key_id", access_key_id}, {"secret_access_key", secret_access_key}, {"session_token", session_token},
          {"azure_key", azure_key},         {"azure_sas", azure_sas}};
}

BucketCredentials BucketCredentials::from_json(const json& j) {
  BucketCredentials c;
  c.access_key_id = j.value("access_key_id", "");
  c.secret_access_key = j.value("secret_access_key", "");
  c.session_token = j.value("session_token", "");
  c.azure_key = j.value("azure_key", "");
  c.azure_sas = j.value("azure_sas", "");
  return c;
}

std::string redact(std::string text, const BucketCredentials& credentials) {
  for (const auto& secret : credentials.secrets()) {
    for (size_t at = text.find(secret); at != std::string::npos; at = text.find(secret, at))
      text.replace(at, secret.size(), "[redacted]");
  }
  return text;
}

}  // namespace nsbox::bucket
