#include "runtime/core/state_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <limits>
#include <random>

#include "isolation/sys/files.h"

namespace nsbox {

Result<StateRoot> StateRoot::resolve(const std::optional<std::string>& root_override) {
  std::optional<std::string> root = root_override;
  if (!root)
    if (const char* env = std::getenv("NSBOX_ROOT"); env && *env) root = env;
  if (root) {
    if (root->empty() || (*root)[0] != '/')
      return fail(make_error(ErrorCode::kInvalidArgument, "--root must be an absolute path, not '" + *root + "'"));
    return StateRoot{*root + "/run", *root + "/data"};
  }
  if (::geteuid() == 0) return StateRoot{"/run/nsbox", "/var/lib/nsbox"};
  std::string uid = std::to_string(::geteuid());
  std::string run, data;
  if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x && *x) run = std::string(x) + "/nsbox";
  else run = "/tmp/nsbox-" + uid;
  if (const char* x = std::getenv("XDG_DATA_HOME"); x && *x) data = std::string(x) + "/nsbox";
  else if (const char* h = std::getenv("HOME"); h && *h) data = std::string(h) + "/.local/share/nsbox";
  else return fail(make_error(ErrorCode::kInvalidArgument, "neither XDG_DATA_HOME nor HOME is set", "pass --root DIR"));
  return StateRoot{run, data};
}

Result<void> StateStore::ensure_dirs() const {
  for (const auto& d : {root_.run_dir, root_.run_dir + "/sandboxes", root_.names_dir(), root_.cache_dir(), root_.data_dir,
                        root_.data_dir + "/volumes", root_.data_dir + "/homes"})
    NSBOX_CHECK(files::ensure_private_dir(d));
  return {};
}

Result<void> validate_shard(const std::string& shard) {
  bool ok = !shard.empty() && shard.size() <= 16;
  for (char c : shard) ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'));
  if (!ok) return fail(make_error(ErrorCode::kInvalidArgument, "invalid shard name '" + shard + "'", "a shard is 1-16 characters of a-z and 0-9"));
  return {};
}

std::string shard_of_id(const std::string& id) {
  if (!id.starts_with("sbx-")) return "";
  auto dash = id.find('-', 4);
  if (dash == std::string::npos) return "";
  std::string shard = id.substr(4, dash - 4);
  return validate_shard(shard) ? shard : "";
}

std::string StateStore::new_id() const {
  static constexpr char kAlphabet[] = "0123456789abcdefghijklmnopqrstuvwxyz";
  std::random_device rd;
  std::string id = shard_.empty() ? "sbx-" : "sbx-" + shard_ + "-";
  for (int i = 0; i < 6; ++i) id += kAlphabet[rd() % 36];
  return id;
}

Result<void> StateStore::validate_name(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 63;
  for (size_t i = 0; ok && i < name.size(); ++i) {
    char c = name[i];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    ok = alnum || (i > 0 && (c == '-' || c == '_' || c == '.'));
  }
  if (!ok || name.rfind("sbx-", 0) == 0)
    return fail(make_error(ErrorCode::kInvalidArgument, "invalid sandbox name '" + name + "'",
                           "names are 1-63 characters of a-z, 0-9, '-', '_' and '.', start with a letter or "
                           "digit, and do not start with 'sbx-' (that is how ids look)"));
  return {};
}

Result<void> StateStore::reserve_name(const std::string& name, const std::string& id) const {
  std::string link = root_.names_dir() + "/" + name;
  if (::symlink(id.c_str(), link.c_str()) == 0) return {};
  if (errno != EEXIST) return fail(sys_error("reserve name " + link));
  // A name left by a sandbox whose directory is gone is free again.
  char target[64] = {};
  ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
  if (n > 0 && !files::exists(root_.sandbox_dir(std::string(target, static_cast<size_t>(n))))) {
    ::unlink(link.c_str());
    if (::symlink(id.c_str(), link.c_str()) == 0) return {};
  }
  return fail(make_error(ErrorCode::kAlreadyExists, "a sandbox named '" + name + "' already exists",
                         "choose another --name, or remove it with `nsbox rm " + name + "`"));
}

void StateStore::release_name(const std::string& name, const std::string& id) const {
  if (name.empty()) return;
  std::string link = root_.names_dir() + "/" + name;
  char target[64] = {};
  ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
  if (n > 0 && std::string(target, static_cast<size_t>(n)) == id) ::unlink(link.c_str());
}

Result<std::string> StateStore::resolve(const std::string& id_or_name) const {
  auto not_found = [&] {
    return fail(make_error(ErrorCode::kNotFound, "no sandbox '" + id_or_name + "'", "`nsbox ls` lists the sandboxes"));
  };
  if (id_or_name.empty() || id_or_name.find('/') != std::string::npos || id_or_name[0] == '.') return not_found();
  if (files::exists(root_.state_file(id_or_name))) return id_or_name;
  char target[64] = {};
  ssize_t n = ::readlink((root_.names_dir() + "/" + id_or_name).c_str(), target, sizeof target - 1);
  if (n > 0) {
    std::string id(target, static_cast<size_t>(n));
    if (files::exists(root_.state_file(id))) return id;
  }
  return not_found();
}

Result<SandboxRecord> StateStore::load(const std::string& id) const {
  auto text = NSBOX_TRY(files::read_file(root_.state_file(id)));
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return fail(make_error(ErrorCode::kInternal, "corrupt sandbox record " + root_.state_file(id)));
  return SandboxRecord::from_json(j);
}

// Records live in the run directory, which a reboot forgets (docs/design.md, "Persistence"): the
// rename keeps readers from a half-written record; an fsync would buy nothing (1-2 ms
// per create, claim and stop where the run directory is on a disk).
Result<void> StateStore::save(const SandboxRecord& record) const {
  return files::atomic_write(root_.state_file(record.id), record.to_json().dump(2) + "\n", 0600, files::Durability::kVolatile);
}

Result<std::vector<std::string>> StateStore::ids() const {
  auto names = NSBOX_TRY(files::list_dir(root_.run_dir + "/sandboxes"));
  std::vector<std::string> out;
  for (auto& n : names)
    if (files::exists(root_.state_file(n))) out.push_back(std::move(n));
  return out;
}

// Open-file-description locks: released when the holder's fd closes (its process dies),
// and testable with F_OFD_GETLK without taking them, so that `nsbox ls` never makes a
// concurrent `nsbox rm` find the sandbox busy.
bool StateStore::supervisor_alive(const std::string& id) const {
  UniqueFd fd(::open(root_.lock_file(id).c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  struct flock probe{};
  probe.l_type = F_WRLCK;
  probe.l_whence = SEEK_SET;
  if (::fcntl(fd.get(), F_OFD_GETLK, &probe) != 0) return false;
  return probe.l_type != F_UNLCK;
}

Result<UniqueFd> StateStore::lock_sandbox(const std::string& id) const {
  UniqueFd fd(::open(root_.lock_file(id).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!fd) return fail(sys_error("open " + root_.lock_file(id)));
  struct flock lock{};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  if (::fcntl(fd.get(), F_OFD_SETLK, &lock) != 0) {
    if (errno == EAGAIN || errno == EACCES)
      return fail(make_error(ErrorCode::kBusy, "sandbox " + id + " is in use by its supervisor or another nsbox command"));
    return fail(sys_error("lock " + root_.lock_file(id)));
  }
  return fd;
}


}  // namespace nsbox
