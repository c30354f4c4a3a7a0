// A request to create a sandbox, in its one JSON form (runtime/client/create_options.h): what the
// HTTP API reads from a remote caller's body (Caller::kRemote), and what the CLI and the
// Python client write (kLocal). The input is the document; the environment is the
// server's, with credentials of its own that a request must never be handed.
//
// Checks: what is accepted has a valid name, environment names without '=', mounts with
// plain absolute mount paths, and workspace entries that stay in /home/user (relative,
// no '..', each once, and what SandboxFs then accepts; host sources only from a local
// caller, absolute and without '..'); accounts that are never root or the sandbox's own, each
// id once and in range, names that cannot add a line or a field to /etc/passwd. From a remote caller: no mount
// names a credentials file (the server would read it for the caller), and a mount that
// brings its own credentials gets none of the server's secrets with them.
#include <algorithm>
#include <cstdint>
#include <set>
#include <sstream>
#include <string>
#include <string_view>

#include "isolation/rootfs.h"
#include "runtime/client/create_options.h"
#include "runtime/client/sandbox_fs.h"
#include "runtime/core/state_store.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using nsbox::protocol::Json;

const nsbox::bucket::Environment kServerEnv = {
    {"AWS_ACCESS_KEY_ID", "SERVERKEYID"},      {"AWS_SECRET_ACCESS_KEY", "SERVERSECRET"},
    {"AWS_SESSION_TOKEN", "SERVERTOKEN"},      {"AZURE_STORAGE_KEY", "U0VSVkVSQVpVUkVLRVk="},
    {"AZURE_STORAGE_SAS_TOKEN", "sv=SERVERSAS"}, {"GCS_HMAC_SECRET", "SERVERHMAC"},
    {"AWS_REGION", "eu-west-1"},               {"S3_ENDPOINT_URL", "http://127.0.0.1:9000"},
    {"AZURE_STORAGE_ACCOUNT", "serveracct"}};

bool plain_relative(const std::string& path) {
  if (path.empty() || path.front() == '/') return false;
  std::stringstream parts(path);
  for (std::string part; std::getline(parts, part, '/');)
    if (part.empty() || part == "." || part == "..") return false;
  return path.back() != '/';
}

void check(const nsbox::CreateOptions& o, const Json& j, nsbox::Caller caller, std::string_view text) {
  if (!o.spec.name.empty()) FUZZ_CHECK(nsbox::StateStore::validate_name(o.spec.name).has_value());
  FUZZ_CHECK(nsbox::rootfs::check_workspace_root(o.spec.workspace_root).has_value());
  FUZZ_CHECK(o.spec.mounts.size() == o.launch.mount_credentials.size());
  for (const auto& [k, v] : o.launch.env) FUZZ_CHECK(!k.empty() && k.find('=') == std::string::npos);
  std::set<std::string> paths;
  for (const auto& w : o.workspace) {
    FUZZ_CHECK(plain_relative(w.path));
    FUZZ_CHECK(paths.insert(w.path).second);
    FUZZ_CHECK(w.mode <= 07777);
    // Host sources: never from a remote caller; from a local one, absolute, without `..`.
    bool host_source = w.kind == nsbox::WorkspaceEntry::Kind::kLocalFile || w.kind == nsbox::WorkspaceEntry::Kind::kLocalDir;
    if (host_source || w.kind == nsbox::WorkspaceEntry::Kind::kGitRepo) FUZZ_CHECK(caller == nsbox::Caller::kLocal);
    if (host_source) FUZZ_CHECK(w.source.starts_with("/") && w.source.find("/../") == std::string::npos && !w.source.ends_with("/.."));
    if (w.path.find('\0') == std::string::npos) {
      const std::string& root = o.spec.workspace_root;
      auto in_sandbox = nsbox::SandboxFs::normalize(w.path, root);
      FUZZ_CHECK(in_sandbox && in_sandbox->starts_with(root + "/"));
    }
  }
  std::set<uint32_t> ids;
  for (const auto& u : o.spec.accounts.users) {
    FUZZ_CHECK(u.uid >= nsbox::SandboxAccounts::kFirstId && u.uid <= nsbox::SandboxAccounts::kLastId);
    FUZZ_CHECK(ids.insert(u.uid).second);
    FUZZ_CHECK(u.name != "root" && u.name != "user" && !u.name.empty() && u.name.size() <= 32);
    FUZZ_CHECK(u.name.find_first_of(":\n\r,/ \0", 0, 7) == std::string::npos);
  }
  for (const auto& g : o.spec.accounts.groups) {
    FUZZ_CHECK(g.gid >= nsbox::SandboxAccounts::kFirstId && g.gid <= nsbox::SandboxAccounts::kLastId);
    FUZZ_CHECK(ids.insert(g.gid).second);
    for (const auto& m : g.members) FUZZ_CHECK(m == "user" || o.spec.accounts.identity(m).has_value());
  }
  FUZZ_CHECK(o.spec.accounts.users.size() <= nsbox::SandboxAccounts::kMaxUsers);
  auto passwd = o.spec.accounts.passwd_lines();
  FUZZ_CHECK(static_cast<size_t>(std::count(passwd.begin(), passwd.end(), '\n')) ==
             (o.spec.accounts.empty() ? 0 : 1 + o.spec.accounts.users.size()));
  // Names are unique across users (each with a group of its name) and groups, and the
  // record's form reads back as it was.
  std::set<std::string> names;
  for (const auto& u : o.spec.accounts.users) FUZZ_CHECK(names.insert(u.name).second);
  for (const auto& g : o.spec.accounts.groups) FUZZ_CHECK(names.insert(g.name).second);
  auto again = nsbox::SandboxAccounts::from_record(o.spec.accounts.to_json());
  FUZZ_CHECK(again && again->to_json() == o.spec.accounts.to_json());
  for (size_t i = 0; i < o.spec.mounts.size(); ++i) {
    const auto& m = o.spec.mounts[i];
    FUZZ_CHECK(m.mount_path.size() > 1 && m.mount_path.front() == '/' && m.mount_path.back() != '/');
    FUZZ_CHECK(!m.bucket.empty());
    if (caller != nsbox::Caller::kRemote) continue;
    FUZZ_CHECK(m.credentials_file.empty());
    if (!j.contains("mounts") || i >= j["mounts"].size()) continue;  // the manifest's, after the list's
    const Json& entry = j["mounts"][i];
    if (!entry.is_object() || !entry.contains("credentials")) continue;
    for (const auto& secret : o.launch.credentials_for(m.mount_path).secrets())
      for (const char* server : {"SERVERSECRET", "SERVERTOKEN", "U0VSVkVSQVpVUkVLRVk=", "sv=SERVERSAS", "SERVERHMAC"})
        FUZZ_CHECK(secret != server || text.find(server) != std::string_view::npos);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  Json j = nsbox::fuzz::parse_json(text);
  if (j.is_discarded()) return 0;
  if (auto o = nsbox::create_options_from_json(j, kServerEnv, nsbox::Caller::kRemote))
    check(*o, j, nsbox::Caller::kRemote, text);
  // A local caller may name a credentials file, which resolve() reads: not from here.
  if (text.find("credentials_file") == std::string_view::npos)
    if (auto o = nsbox::create_options_from_json(j, kServerEnv, nsbox::Caller::kLocal))
      check(*o, j, nsbox::Caller::kLocal, text);
  return 0;
}
