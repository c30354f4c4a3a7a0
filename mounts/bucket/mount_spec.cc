#include "mounts/bucket/mount_spec.h"

#include <string.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <span>
#include <sstream>

#include "isolation/sys/secret.h"

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
// Trees a bucket may be mounted inside but not over: a mount at one of them, or at a
// directory above one (/opt, /mnt, /home), would hide what the sandbox keeps there.
constexpr std::string_view kHiddenByAncestors[] = {"/home/user", "/tmp"};

Error invalid(std::string message, std::string hint = {}) {
  return make_error(ErrorCode::kInvalidArgument, std::move(message), std::move(hint));
}

bool has_control(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

// `s` for an error message: control characters shown as '?', so that a newline in a name
// cannot forge a second line of output.
std::string printable(std::string s) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return s;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_lower_alnum(char c) { return (c >= 'a' && c <= 'z') || is_digit(c); }
bool is_alnum(char c) { return is_lower_alnum(c) || (c >= 'A' && c <= 'Z'); }

bool all_of(std::string_view s, bool (*allowed)(char)) { return std::all_of(s.begin(), s.end(), allowed); }

// Names end up in a host name (virtual-host addressing, Azure's and R2's endpoints), a
// URL path, FUSE's fsname= option, rclone's config and s3fs's -o list: only characters
// that mean nothing in any of them get there.
//
// S3, R2, GCS: AWS's characters (a-z 0-9 '.' '-', a letter or digit at each end, no "..")
// widened to what older buckets still use on AWS and GCS ('_', upper case, up to 255).
// The length AWS asks for (3-63) is the store's to enforce: a short name injects nothing,
// and test stores (s3rver) take them.
Result<void> check_bucket_name(const std::string& name, std::string_view kind) {
  auto allowed = [](char c) { return is_alnum(c) || c == '.' || c == '-' || c == '_'; };
  if (name.empty() || name.size() > 255 || !all_of(name, allowed) || !is_alnum(name.front()) || !is_alnum(name.back()) ||
      name.find("..") != std::string::npos)
    return fail(invalid("'" + printable(name) + "' is not a valid " + std::string(kind) + " bucket name",
                        "bucket names are letters, digits, '.', '-' or '_', starting and ending with a letter or digit "
                        "(AWS's rule for new buckets: 3-63 lower-case letters, digits, '.' or '-')"));
  return {};
}

// Azure: containers are 3-63 of a-z 0-9 '-', a letter or digit at each end, no "--";
// accounts are 3-24 of a-z 0-9.
Result<void> check_azure_names(const BucketMount& m) {
  const std::string& c = m.bucket;
  auto allowed = [](char ch) { return is_lower_alnum(ch) || ch == '-'; };
  if (c.size() < 3 || c.size() > 63 || !all_of(c, allowed) || !is_lower_alnum(c.front()) || !is_lower_alnum(c.back()) ||
      c.find("--") != std::string::npos)
    return fail(invalid("'" + printable(c) + "' is not a valid Azure container name",
                        "container names are 3-63 lower-case letters, digits or single '-', starting and ending with a letter or digit"));
  if (!m.account.empty() && (m.account.size() < 3 || m.account.size() > 24 || !all_of(m.account, is_lower_alnum)))
    return fail(invalid("'" + printable(m.account) + "' is not a valid Azure storage account name",
                        "account names are 3-24 lower-case letters or digits"));
  return {};
}

// http:// or https:// and a host: libcurl would take file://, ftp:// or a URL with
// credentials in it, and a ',' or a newline would reach s3fs's options and rclone's config.
Result<void> check_endpoint_url(const std::string& url) {
  auto allowed = [](char c) {
    return is_alnum(c) || c == '.' || c == '-' || c == '_' || c == '~' || c == ':' || c == '/' || c == '[' || c == ']' || c == '%';
  };
  std::string_view rest = url;
  if (rest.starts_with("https://")) rest.remove_prefix(8);
  else if (rest.starts_with("http://")) rest.remove_prefix(7);
  else
    return fail(invalid("endpoint_url '" + printable(url) + "' is not an http:// or https:// URL",
                        "e.g. https://s3.eu-west-1.amazonaws.com or http://127.0.0.1:9000"));
  if (rest.empty() || rest.front() == '/' || rest.front() == ':')
    return fail(invalid("endpoint_url '" + printable(url) + "' has no host"));
  if (!all_of(rest, allowed))
    return fail(invalid("endpoint_url '" + printable(url) + "' has a character that belongs in no host, port or path",
                        "give the scheme, host, port and path only (no user, query or fragment)"));
  return {};
}

// The fields a mount has so far (resolve fills the rest, and checks again).
Result<void> check_names(const BucketMount& m) {
  if (m.kind == BucketKind::kAzureBlob) NSBOX_CHECK(check_azure_names(m));
  else NSBOX_CHECK(check_bucket_name(m.bucket, kind_name(m.kind)));
  if (m.kind == BucketKind::kR2 && !m.account.empty() && (m.account.size() > 63 || !all_of(m.account, is_alnum)))
    return fail(invalid("'" + printable(m.account) + "' is not a valid R2 account id", "an account id is letters and digits"));
  auto region_char = [](char c) { return is_alnum(c) || c == '-' || c == '_' || c == '.'; };
  if (!m.region.empty() && (m.region.size() > 64 || !all_of(m.region, region_char)))
    return fail(invalid("region '" + printable(m.region) + "' is not a region name", "e.g. us-east-1, or auto"));
  if (!m.endpoint_url.empty()) NSBOX_CHECK(check_endpoint_url(m.endpoint_url));
  return {};
}

bool is_under(std::string_view path, std::string_view dir) {
  return path == dir || (path.starts_with(dir) && path.size() > dir.size() && path[dir.size()] == '/');
}

// Absolute, normalised, not '/', not in a reserved tree; relative paths are under /home/user.
Result<std::string> check_mount_path(std::string path) {
  if (path.empty()) return fail(invalid("a bucket mount needs a mount path"));
  if (has_control(path)) return fail(invalid("mount path '" + printable(path) + "' has a control character"));
  if (path.front() != '/') path = "/home/user/" + path;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  std::stringstream parts(path.substr(1));
  std::string part;
  while (std::getline(parts, part, '/'))
    if (part.empty() || part == "." || part == "..")
      return fail(invalid("mount path '" + path + "' is not a plain absolute path (no '.', '..' or '//')"));
  if (path == "/") return fail(invalid("a bucket cannot be mounted over /", "mount it at a directory of its own, e.g. /data"));
  for (auto reserved : kReservedPaths)
    if (is_under(path, reserved)) return fail(invalid("a bucket cannot be mounted at " + path + ": " + std::string(reserved) + " belongs to the sandbox"));
  for (auto trees : {std::span<const std::string_view>(kReservedPaths), std::span<const std::string_view>(kHiddenByAncestors)})
    for (auto tree : trees)
      if (is_under(tree, path))
        return fail(invalid("a bucket cannot be mounted over " + path + ": it would hide " + std::string(tree),
                            "mount it at a directory of its own, e.g. /data"));
  return path;
}

std::string normalise_prefix(std::string prefix) {
  while (!prefix.empty() && prefix.front() == '/') prefix.erase(0, 1);
  if (!prefix.empty() && prefix.back() != '/') prefix += '/';
  return prefix;
}

// A prefix is a key's start, so almost anything goes; not control characters (a newline
// would end a line of rclone's output or our log), and not ',' for the tools, whose
// argument parsers split on it.
Result<void> check_prefix(const std::string& prefix, MountStrategy strategy) {
  if (has_control(prefix)) return fail(invalid("bucket prefix '" + printable(prefix) + "' has a control character"));
  if (strategy != MountStrategy::kBuiltin && prefix.find(',') != std::string::npos)
    return fail(invalid("bucket prefix '" + prefix + "' has a ',', which " + std::string(strategy_name(strategy)) + " cannot take",
                        "use the builtin strategy for this prefix"));
  std::stringstream parts(prefix);
  std::string part;
  while (std::getline(parts, part, '/'))
    if (part.empty() || part == "." || part == "..")
      return fail(invalid("bucket prefix '" + prefix + "' has an empty, '.' or '..' segment"));
  return {};
}

// `staging_bytes` in a manifest: a number of bytes, or a size string as --mount takes it.
Result<uint64_t> staging_bytes_of(const json& value) {
  if (value.is_string()) return parse_staging_bytes(value.get<std::string>());
  if (value.is_number_unsigned()) return parse_staging_bytes(std::to_string(value.get<uint64_t>()));
  return fail(invalid("staging_bytes must be a number of bytes or a size like \"512M\""));
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
  j["staging_bytes"] = staging_bytes;
  return j;
}

json BucketMount::topology() const {
  json j = to_json();
  j.erase("credentials_file");
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
    if (j.contains("staging_bytes")) m.staging_bytes = NSBOX_TRY(staging_bytes_of(j["staging_bytes"]));
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
  NSBOX_CHECK(check_prefix(m.prefix, m.strategy));
  if (m.strategy == MountStrategy::kS3fs && m.kind == BucketKind::kAzureBlob)
    return fail(invalid("s3fs cannot mount Azure Blob containers", "use the builtin or rclone strategy"));
  NSBOX_CHECK(check_names(m));
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
  // Options after the path, in any order, each at most once: ":rw" or ":ro", and
  // ":staging_bytes=SIZE". What is not one of them is part of the path.
  bool read_only = true, access_given = false;
  std::optional<std::string> staging_bytes;
  for (auto at = target.rfind(':'); at != std::string::npos; at = target.rfind(':')) {
    std::string option = target.substr(at + 1);
    if ((option == "rw" || option == "ro") && !access_given) read_only = option == "ro", access_given = true;
    else if (option.starts_with("staging_bytes=") && staging_bytes)
      return fail(invalid("--mount " + std::string(flag) + ": staging_bytes is given twice"));
    else if (option.starts_with("staging_bytes=")) staging_bytes = option.substr(14);
    else break;
    target.resize(at);
  }

  json j = {{"mount_path", target}, {"read_only", read_only}};
  if (staging_bytes) j["staging_bytes"] = *staging_bytes;
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

Result<uint64_t> parse_staging_bytes(std::string_view text) {
  constexpr uint64_t kMin = 1ull << 20, kMax = 1ull << 50;
  auto bad = [&] {
    return fail(invalid("staging_bytes '" + printable(std::string(text)) + "' is not a size from 1M to 1P",
                        "give bytes, or a whole number with K, M, G, T or P, e.g. 512M or 10G"));
  };
  size_t digits = 0;
  uint64_t value = 0;
  for (; digits < text.size() && is_digit(text[digits]); ++digits) {
    if (value > kMax) return bad();
    value = value * 10 + static_cast<uint64_t>(text[digits] - '0');
  }
  std::string_view unit = text.substr(digits);
  uint64_t scale = unit.empty()                       ? 1
                   : unit == "K" || unit == "KiB" ? 1ull << 10
                   : unit == "M" || unit == "MiB" ? 1ull << 20
                   : unit == "G" || unit == "GiB" ? 1ull << 30
                   : unit == "T" || unit == "TiB" ? 1ull << 40
                   : unit == "P" || unit == "PiB" ? 1ull << 50
                                                  : 0;
  if (digits == 0 || scale == 0 || value > kMax / scale || value * scale < kMin) return bad();
  return value * scale;
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

std::string credential_variables(BucketKind kind) {
  switch (kind) {
    case BucketKind::kS3: return "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY";
    case BucketKind::kR2: return "R2_ACCESS_KEY_ID, R2_SECRET_ACCESS_KEY";
    case BucketKind::kGcs: return "GCS_HMAC_ACCESS_ID, GCS_HMAC_SECRET";
    case BucketKind::kAzureBlob: return "AZURE_STORAGE_KEY or AZURE_STORAGE_SAS_TOKEN";
  }
  return "";
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
        // AWS's own endpoint: virtual-host style, except for names TLS or DNS cannot
        // carry ('.', and the legacy '_' and upper case).
        mount.path_style = mount.bucket.size() > 63 || !all_of(mount.bucket, [](char c) { return is_lower_alnum(c) || c == '-'; });
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
  NSBOX_CHECK(check_names(mount));
  // Values go into rclone's config and s3fs's passwd file one per line.
  for (const auto* value : {&c.access_key_id, &c.secret_access_key, &c.session_token, &c.azure_key, &c.azure_sas})
    if (has_control(*value))
      return fail(invalid(mount.source() + ": a credential has a control character (a newline?)",
                          "check the credentials' values in the environment or the credentials file"));
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

void BucketCredentials::wipe() {
  for (auto* s : {&access_key_id, &secret_access_key, &session_token, &azure_key, &azure_sas}) sys::wipe(*s);
}

std::string redact(std::string text, const BucketCredentials& credentials) {
  constexpr std::string_view kRedacted = "[redacted]";
  for (const auto& secret : credentials.secrets()) {
    // The search goes on after the replacement: a secret inside "[redacted]" ("red")
    // would otherwise be found in it again, forever.
    for (size_t at = text.find(secret); at != std::string::npos; at = text.find(secret, at + kRedacted.size()))
      text.replace(at, secret.size(), kRedacted);
  }
  return text;
}

Result<void> check_mount_paths(const std::vector<std::string>& mount_paths) {
  std::vector<std::string> paths;
  for (const auto& p : mount_paths) paths.push_back(NSBOX_TRY(check_mount_path(p)));
  for (size_t i = 0; i < paths.size(); ++i)
    for (size_t j = 0; j < paths.size(); ++j) {
      if (i == j) continue;
      if (paths[i] == paths[j]) return fail(invalid("two mounts at " + paths[i]));
      if (is_under(paths[j], paths[i]))
        return fail(invalid("mount path " + paths[j] + " is inside the mount at " + paths[i],
                            "bucket mounts cannot be nested; mount them side by side, e.g. /data/a and /data/b"));
    }
  return {};
}

}  // namespace nsbox::bucket
