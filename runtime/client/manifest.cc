#include "runtime/client/manifest.h"

#include <cstdlib>
#include <functional>
#include <set>

#include "isolation/rootfs.h"
#include "isolation/sys/files.h"
#include "isolation/sys/sha256.h"

namespace nsbox {
namespace {

using protocol::Json;

// A request's manifest is hostile input: its entries and their nesting are bounded (a 16
// MiB body could hold 600,000 entries, or nest deep enough to exhaust the stack).
constexpr size_t kMaxEntries = 10000;
constexpr int kMaxDepth = 32;

Error malformed(std::string message) { return make_error(ErrorCode::kMalformedRequest, std::move(message)); }
Error invalid(std::string message, std::string hint = {}) {
  return make_error(ErrorCode::kInvalidArgument, std::move(message), std::move(hint));
}

// "a/./b" -> "a/b"; refuses absolute paths (a drive letter too), `..` and empty names.
Result<std::string> workspace_path(const std::string& prefix, const std::string& key) {
  if (key.empty() || key.front() == '/' || key.front() == '\\' || (key.size() > 1 && key[1] == ':'))
    return fail(invalid("manifest path must be relative: " + prefix + key));
  if (key.find('\0') != std::string::npos) return fail(invalid("manifest path has a NUL byte: " + prefix + key));
  auto clean = files::clean_lexically(key);
  if (!clean) return fail(invalid("manifest path must not escape root: " + prefix + key));
  if (clean->empty()) return fail(invalid("manifest path names the root itself: " + prefix + key));
  return prefix + *clean;
}

// An absolute host path, lexically normalised; `..` refused (a source must not climb out
// of its base by name any more than by a link).
Result<std::string> host_path(const std::string& entry, const std::string& src, const LocalSourceRoots& roots) {
  auto clean = files::clean_lexically(src.starts_with("/") ? src : roots.base + "/" + src);
  if (!clean) return fail(invalid("manifest entry " + entry + ": src " + src + " must not use `..`"));
  std::string out = "/" + *clean;
  auto inside = [&](const std::string& root) { return out == root || out.starts_with(root == "/" ? "/" : root + "/"); };
  if (inside(roots.base)) return out;
  for (const auto& g : roots.grants)
    if (inside(g)) return out;
  return fail(make_error(ErrorCode::kPermissionDenied,
                         "manifest entry " + entry + ": src " + out + " is outside the manifest's directory " + roots.base,
                         "move it there, or grant its directory with --local-grant DIR"));
}

Result<mode_t> entry_mode(const std::string& path, const Json& e) {
  auto it = e.find("mode");
  if (it == e.end()) it = e.find("permissions");
  if (it == e.end()) return static_cast<mode_t>(0755);
  unsigned long mode = 0;
  if (it->is_number_unsigned()) {
    mode = it->get<unsigned long>();
  } else if (it->is_string() && !it->get<std::string>().empty()) {
    std::string text = it->get<std::string>();
    char* end = nullptr;
    mode = std::strtoul(text.c_str(), &end, 8);
    if (*end) return fail(invalid("manifest entry " + path + ": mode '" + text + "' is not octal"));
  } else {
    return fail(malformed("manifest entry " + path + ": \"permissions\" must be an octal string or a number"));
  }
  if (mode > 07777) return fail(invalid("manifest entry " + path + ": mode " + std::to_string(mode) + " is not a file mode"));
  return static_cast<mode_t>(mode);
}

Result<std::string> string_of(const std::string& path, const Json& e, const char* key, bool required) {
  auto it = e.find(key);
  if (it == e.end() || it->is_null()) {
    if (required) return fail(malformed("manifest entry " + path + " needs \"" + key + "\""));
    return std::string();
  }
  if (!it->is_string()) return fail(malformed("manifest entry " + path + ": \"" + key + "\" must be a string"));
  return it->get<std::string>();
}

// "https://...", "ssh://...", "file://...": a scheme ([a-z][a-z0-9+.-]*) then "://" at
// the very start (a path holding "://" further on is a path).
bool has_url_scheme(const std::string& s) {
  size_t at = s.find("://");
  if (at == std::string::npos || at == 0 || !(s[0] >= 'a' && s[0] <= 'z')) return false;
  for (size_t i = 0; i < at; ++i) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '.' || c == '-')) return false;
  }
  return true;
}

bool is_mount_type(const std::string& t) {
  return t == "s3" || t == "r2" || t == "gcs" || t == "gs" || t == "azure_blob" || t == "azure" || t == "azblob";
}

// A bucket mount entry as a mount document: mount_path left out -> the entry's path
// under the root; relative -> under the root; absolute -> as given.
Result<Json> mount_document(const std::string& root, const std::string& path, const Json& e) {
  Json m = e;
  for (const char* key : {"description", "ephemeral", "permissions", "mode", "group"}) m.erase(key);
  if (auto s = m.find("mount_strategy"); s != m.end()) {
    if (s->is_string()) m["strategy"] = *s;
    m.erase("mount_strategy");
  }
  std::string mount_path = NSBOX_TRY(string_of(path, e, "mount_path", false));
  if (mount_path.empty()) mount_path = root + "/" + path;
  else if (!mount_path.starts_with("/")) mount_path = root + "/" + NSBOX_TRY(workspace_path("", mount_path));
  m["mount_path"] = mount_path;
  return m;
}

struct Parser {
  const LocalSourceRoots& roots;
  Manifest& out;
  size_t count = 0;

  Result<void> entries(const Json& entries, const std::string& prefix, int depth) {
    if (!entries.is_object()) return fail(malformed("manifest \"entries\" must be an object of path -> entry"));
    if (depth > kMaxDepth) return fail(invalid("manifest entries nest deeper than " + std::to_string(kMaxDepth) + " levels at " + prefix));
    for (const auto& [key, e] : entries.items()) {
      if (++count > kMaxEntries) return fail(invalid("a manifest has at most " + std::to_string(kMaxEntries) + " entries"));
      NSBOX_CHECK(entry(NSBOX_TRY(workspace_path(prefix, key)), e, depth));
    }
    return {};
  }

  Result<void> entry(const std::string& path, const Json& e, int depth) {
    if (!e.is_object() || !e.contains("type") || !e["type"].is_string())
      return fail(malformed("manifest entry " + path + " needs a \"type\""));
    std::string type = e["type"].get<std::string>();
    if (auto d = e.find("description"); d != e.end() && !d->is_string() && !d->is_null())
      return fail(malformed("manifest entry " + path + ": \"description\" must be a string"));
    auto eph = e.find("ephemeral");
    if (eph != e.end() && !eph->is_boolean()) return fail(malformed("manifest entry " + path + ": \"ephemeral\" must be true or false"));
    if (is_mount_type(type)) {
      out.mounts.push_back(NSBOX_TRY(mount_document(out.root, path, e)));  // always ephemeral
      return {};
    }
    // The mode first: a NSBOX_TRY's return from inside a braced initializer would skip the
    // destructor of the members already made (a leak the fuzzer found).
    mode_t mode = NSBOX_TRY(entry_mode(path, e));
    WorkspaceEntry w;
    w.path = path;
    w.mode = mode;
    w.ephemeral = eph != e.end() && eph->get<bool>();
    if (type == "file") {
      w.kind = WorkspaceEntry::Kind::kFile;
      if (e.contains("content") && e["content"].is_string()) w.content = e["content"].get<std::string>();
      else if (e.contains("content_b64") && e["content_b64"].is_string())
        w.content = NSBOX_TRY(protocol::base64_decode(e["content_b64"].get<std::string>()));
      else if (e.contains("content") || e.contains("content_b64"))
        return fail(malformed("manifest entry " + path + ": \"content\" must be a string"));
      out.entries.push_back(std::move(w));
    } else if (type == "dir") {
      w.kind = WorkspaceEntry::Kind::kDir;
      out.entries.push_back(std::move(w));
      if (e.contains("children")) NSBOX_CHECK(entries(e["children"], path + "/", depth + 1));
    } else if (type == "local_file" || type == "local_dir" || type == "git_repo") {
      if (!roots.allowed())
        return fail(make_error(ErrorCode::kPermissionDenied,
                               "manifest entry " + path + ": a " + type + " names a path on the server's host, which a request may not",
                               "send the files as file and dir entries (the Python client does that for local_file, local_dir "
                               "and git_repo)"));
      w.kind = type == "local_file"  ? WorkspaceEntry::Kind::kLocalFile
               : type == "local_dir" ? WorkspaceEntry::Kind::kLocalDir
                                     : WorkspaceEntry::Kind::kGitRepo;
      if (w.kind == WorkspaceEntry::Kind::kGitRepo) {
        std::string repo = NSBOX_TRY(string_of(path, e, "repo", true));
        std::string host = NSBOX_TRY(string_of(path, e, "host", false));
        w.ref = NSBOX_TRY(string_of(path, e, "ref", false));
        if (w.ref.starts_with("-") || w.ref.find_first_of(" \t\n:~^?*[\\") != std::string::npos)
          return fail(invalid("manifest entry " + path + ": ref '" + w.ref + "' is not a branch, tag or commit"));
        std::string sub = NSBOX_TRY(string_of(path, e, "subpath", false));
        if (!sub.empty() && sub != "." && sub != "/") w.subpath = NSBOX_TRY(workspace_path("", sub));
        // A URL is the remote's; a path (absolute, or ./ relative) is a repository on this
        // host, confined like a local_dir; owner/name is on `host` (github.com by default).
        if (has_url_scheme(repo)) {
          if (repo.starts_with("file://")) w.source = NSBOX_TRY(host_path(path, repo.substr(7), roots));
          else w.source = repo;
        } else if (repo.starts_with("/") || repo.starts_with("./") || repo == ".") {
          w.source = NSBOX_TRY(host_path(path, repo, roots));
        } else {
          if (repo.starts_with("-") || repo.find("..") != std::string::npos)
            return fail(invalid("manifest entry " + path + ": repo '" + repo + "' is not owner/name, a URL or a path"));
          w.source = "https://" + (host.empty() ? std::string("github.com") : host) + "/" + repo;
        }
        if (w.source.starts_with("-")) return fail(invalid("manifest entry " + path + ": repo '" + repo + "' starts with '-'"));
      } else {
        w.source = NSBOX_TRY(host_path(path, NSBOX_TRY(string_of(path, e, "src", true)), roots));
      }
      out.entries.push_back(std::move(w));
    } else {
      return fail(invalid("manifest entry " + path + " has type '" + type + "'",
                          "types are file, dir, local_file, local_dir, git_repo, s3, r2, gcs and azure_blob"));
    }
    return {};
  }

  Result<void> environment(const Json& env) {
    if (!env.is_object()) return fail(malformed("manifest \"environment\" must be an object"));
    for (const auto& [k, v] : env.items()) {
      const Json* value = &v;
      if (v.is_object()) {
        auto it = v.find("value");
        if (it == v.end()) return fail(malformed("manifest environment " + k + " needs a \"value\""));
        value = &*it;
      }
      if (!value->is_string()) return fail(malformed("manifest environment " + k + " must be a string"));
      if (k.find('=') != std::string::npos) return fail(invalid("environment variable name '" + k + "' has a '='"));
      out.environment.push_back(NSBOX_TRY(parse_env_assignment(k + "=" + value->get<std::string>())));
    }
    return {};
  }
};

// What identifies a manifest, credentials aside (a snapshot's fingerprint covers it: a
// resume with another manifest restores). Environment values are left out too: they may
// be secrets, and env names are in the spec already.
std::string manifest_digest(const Json& m) {
  // Down the entries and their children only (the parse bounded their depth).
  std::function<void(Json&)> strip = [&](Json& entries) {
    if (!entries.is_object()) return;
    for (auto& [k, e] : entries.items()) {
      if (!e.is_object()) continue;
      e.erase("credentials");
      if (auto c = e.find("children"); c != e.end()) strip(*c);
    }
  };
  Json doc = m;
  if (auto e = doc.find("entries"); e != doc.end()) strip(*e);
  if (auto env = doc.find("environment"); env != doc.end() && env->is_object()) {
    Json names = Json::array();
    for (const auto& [k, v] : env->items()) names.push_back(k);
    *env = names;
  }
  return sha256_hex(doc.dump(-1, ' ', false, Json::error_handler_t::replace));
}

}  // namespace

std::vector<std::string> Manifest::ephemeral_paths() const {
  std::vector<std::string> out;
  for (const auto& e : entries)
    if (e.ephemeral) out.push_back(e.path);
  return out;
}

bool is_manifest_v1(const Json& j) { return j.is_object() && (j.contains("version") || j.contains("entries")); }

Result<Manifest> parse_manifest_v1(const Json& j, const LocalSourceRoots& roots, const std::string& default_root) {
  if (!j.is_object()) return fail(malformed("a manifest is a JSON object"));
  if (auto v = j.find("version"); v != j.end() && (!v->is_number_integer() || v->get<int64_t>() != 1))
    return fail(invalid("manifest version must be 1"));
  Manifest out;
  out.root = default_root;
  if (auto root = j.find("root"); root != j.end() && !root->is_null()) {
    if (!root->is_string()) return fail(malformed("manifest \"root\" must be a string"));
    out.root = root->get<std::string>();
    while (out.root.size() > 1 && out.root.back() == '/') out.root.pop_back();
    NSBOX_CHECK_CTX(rootfs::check_workspace_root(out.root), "manifest root");
  }
  auto accounts = SandboxAccounts::from_request(j.value("users", Json()), j.value("groups", Json()));
  if (!accounts) return fail(std::move(accounts.error()).context("manifest"));
  out.accounts = std::move(*accounts);
  Parser parser{roots, out};
  if (auto entries = j.find("entries"); entries != j.end()) NSBOX_CHECK(parser.entries(*entries, "", 0));
  if (auto env = j.find("environment"); env != j.end() && !env->is_null()) NSBOX_CHECK(parser.environment(*env));
  // Each path once; nothing inside what is copied whole (a local_dir, a git_repo: it would
  // be overwritten), inside a mount (hidden), or a file over a mount. By sets and each
  // path's ancestors: linear in the entries, whatever their number.
  std::set<std::string> seen, whole, files, mounts;
  for (const auto& w : out.entries) {
    if (!seen.insert(w.path).second) return fail(invalid("manifest path given twice: " + w.path));
    if (w.kind != WorkspaceEntry::Kind::kDir) (w.kind == WorkspaceEntry::Kind::kFile ? files : whole).insert(w.path);
  }
  for (const auto& m : out.mounts) mounts.insert(m["mount_path"].get<std::string>());
  for (const auto& w : out.entries) {
    std::string full = out.root + "/" + w.path;
    if (mounts.count(full)) return fail(invalid("manifest entry " + w.path + " and the mount at " + full + " overlap"));
    for (size_t at = w.path.rfind('/'); at != std::string::npos; at = at == 0 ? std::string::npos : w.path.rfind('/', at - 1)) {
      std::string parent = w.path.substr(0, at);
      if (whole.count(parent)) return fail(invalid("manifest entry " + w.path + " is inside " + parent + ", which is copied whole"));
      if (mounts.count(out.root + "/" + parent))
        return fail(invalid("manifest entry " + w.path + " and the mount at " + out.root + "/" + parent + " overlap"));
    }
  }
  for (const auto& mount_path : mounts) {
    // A mount under a file (or a copied tree) would be made on something that is not a
    // directory of its own.
    if (!mount_path.starts_with(out.root + "/")) continue;
    std::string rel = mount_path.substr(out.root.size() + 1);
    for (size_t at = rel.rfind('/'); at != std::string::npos; at = at == 0 ? std::string::npos : rel.rfind('/', at - 1)) {
      std::string parent = rel.substr(0, at);
      if (files.count(parent) || whole.count(parent))
        return fail(invalid("manifest entry " + parent + " and the mount at " + mount_path + " overlap"));
    }
  }
  out.digest = manifest_digest(j);  // once the parse has bounded its depth
  return out;
}

}  // namespace nsbox
