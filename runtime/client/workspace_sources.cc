#include "runtime/client/workspace_sources.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "isolation/sys/files.h"
#include "isolation/sys/program.h"
#include "isolation/sys/syscall.h"
#include "isolation/sys/unique_fd.h"
#include "runtime/protocol/frame.h"

namespace nsbox {
namespace {

constexpr uint64_t kMaxMembers = 100000;
constexpr int kMaxDepth = 64;
constexpr double kGitTimeoutS = 300;
constexpr size_t kGitMaxOutput = 64 << 10;

using Kind = WorkspaceEntry::Kind;

Error refused(const std::string& entry, const std::string& what) {
  return make_error(ErrorCode::kInvalidArgument, "manifest entry " + entry + ": " + what);
}

// A URL's user and password (a token, perhaps) are never shown.
std::string shown_repo(const std::string& repo) {
  auto scheme = repo.find("://");
  if (scheme == std::string::npos) return repo;
  auto at = repo.find('@', scheme + 3);
  auto slash = repo.find('/', scheme + 3);
  if (at == std::string::npos || (slash != std::string::npos && at > slash)) return repo;
  return repo.substr(0, scheme + 3) + "***" + repo.substr(at);
}

// Opens an absolute host path with no symlink anywhere in it.
Result<UniqueFd> open_source(const std::string& entry, const std::string& path, int flags) {
  open_how how{};
  how.flags = static_cast<uint64_t>(flags | O_NOFOLLOW | O_CLOEXEC);
  how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  UniqueFd fd(static_cast<int>(sys::retry_eintr([&] { return ::syscall(SYS_openat2, AT_FDCWD, path.c_str(), &how, sizeof how); })));
  if (fd) return fd;
  if (errno == ELOOP) return fail(refused(entry, path + " is or passes through a symlink, which a manifest may not copy"));
  if (errno == ENOTDIR && (flags & O_DIRECTORY)) return fail(refused(entry, path + " is not a directory"));
  return fail(make_error(ErrorCode::kInvalidArgument, "manifest entry " + entry + ": open " + path + ": " + std::strerror(errno)));
}

// What a tree walk hands on: each directory (before what it holds) and each regular file
// (open, with its stat), by its path relative to the tree.
struct TreeVisit {
  std::function<Result<void>(const std::string& rel, const struct stat& st)> dir;
  std::function<Result<void>(const std::string& rel, int fd, const struct stat& st)> file;
};

struct TreeWalk {
  const std::string& entry;
  const std::string& root;  // for messages
  const TreeVisit& visit;
  bool skip_git;            // a clone's own .git at its top
  uint64_t members = 0;

  Result<void> dir(int fd, const std::string& rel, int depth) {
    if (depth > kMaxDepth) return fail(refused(entry, root + "/" + rel + " is nested more than " + std::to_string(kMaxDepth) + " levels"));
    UniqueFd listing(::dup(fd));
    if (!listing) return fail(sys_error("dup"));
    DIR* d = ::fdopendir(listing.release());
    if (!d) return fail(sys_error("read " + root + "/" + rel));
    std::vector<std::string> names;
    errno = 0;
    bool too_many = false;
    while (dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name == "." || name == ".." || (skip_git && rel.empty() && name == ".git")) continue;
      // Bounded while reading: a directory of millions of names costs no more than this.
      if (members + names.size() >= kMaxMembers) {
        too_many = true;
        break;
      }
      names.push_back(std::move(name));
    }
    ::closedir(d);
    if (too_many)
      return fail(make_error(ErrorCode::kLimitExceeded, "manifest entry " + entry + ": " + root + " holds more than " +
                                                            std::to_string(kMaxMembers) + " files and directories"));
    std::sort(names.begin(), names.end());
    for (const auto& name : names) {
      if (++members > kMaxMembers)
        return fail(make_error(ErrorCode::kLimitExceeded, "manifest entry " + entry + ": " + root + " holds more than " +
                                                              std::to_string(kMaxMembers) + " files and directories"));
      std::string child = rel.empty() ? name : rel + "/" + name;
      struct stat st{};
      if (::fstatat(fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return fail(sys_error("stat " + root + "/" + child));
      if (S_ISLNK(st.st_mode)) return fail(refused(entry, root + "/" + child + " is a symlink (symlink_not_supported)"));
      if (S_ISDIR(st.st_mode)) {
        UniqueFd sub(::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!sub) return fail(sys_error("open " + root + "/" + child));
        if (visit.dir) NSBOX_CHECK(visit.dir(child, st));
        NSBOX_CHECK(dir(sub.get(), child, depth + 1));
      } else if (S_ISREG(st.st_mode)) {
        if (!visit.file) continue;
        UniqueFd in(::openat(fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
        if (!in) return fail(sys_error("open " + root + "/" + child));
        if (::fstat(in.get(), &st) != 0 || !S_ISREG(st.st_mode)) return fail(refused(entry, root + "/" + child + " changed while read"));
        NSBOX_CHECK(visit.file(child, in.get(), st));
      } else {
        return fail(refused(entry, root + "/" + child + " is not a regular file or directory (a FIFO, socket or device)"));
      }
    }
    return {};
  }
};

// Walks the host tree at `path` (a file or a directory) without following links.
Result<void> walk_source(const std::string& entry, const std::string& path, bool skip_git, const TreeVisit& visit) {
  UniqueFd fd = NSBOX_TRY(open_source(entry, path, O_RDONLY | O_NONBLOCK));
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) return fail(sys_error("stat " + path));
  if (S_ISREG(st.st_mode)) return visit.file ? visit.file("", fd.get(), st) : Result<void>{};
  if (!S_ISDIR(st.st_mode)) return fail(refused(entry, path + " is not a regular file or directory"));
  if (visit.dir) NSBOX_CHECK(visit.dir("", st));
  TreeWalk walk{entry, path, visit, skip_git};
  return walk.dir(fd.get(), "", 0);
}

// A source's kind against its entry's: a local_file must be a file, a local_dir a directory.
Result<void> check_source(const WorkspaceEntry& e, const std::string& tree) {
  UniqueFd fd = NSBOX_TRY(open_source(e.path, tree, O_RDONLY | O_NONBLOCK));
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) return fail(sys_error("stat " + tree));
  if (e.kind == Kind::kLocalFile && !S_ISREG(st.st_mode)) return fail(refused(e.path, "src " + tree + " is not a regular file"));
  if (e.kind != Kind::kLocalFile && !S_ISDIR(st.st_mode)) return fail(refused(e.path, tree + " is not a directory"));
  return walk_source(e.path, tree, e.kind == Kind::kGitRepo, {});
}

// A URL's user and password, taken out of it: git gets them in its environment as an
// Authorization header (never on its command line, which every local user can read, nor in
// the clone's config).
struct RepoUrl {
  std::string url;         // without user:password@
  std::string basic_auth;  // base64 of "user:password"; empty: none
};
RepoUrl split_userinfo(const std::string& repo) {
  auto scheme = repo.find("://");
  if (scheme == std::string::npos) return {repo, {}};
  auto at = repo.find('@', scheme + 3);
  auto slash = repo.find('/', scheme + 3);
  if (at == std::string::npos || (slash != std::string::npos && at > slash)) return {repo, {}};
  return {repo.substr(0, scheme + 3) + repo.substr(at + 1), protocol::base64_encode(repo.substr(scheme + 3, at - scheme - 3))};
}

Result<void> run_git(const std::string& entry, std::vector<std::string> args, const std::string& dir, const std::string& home,
                     const std::string& repo, std::string* out = nullptr) {
  std::vector<std::string> argv = {"/usr/bin/git", "-c", "core.hooksPath=/dev/null", "-c", "protocol.file.allow=always",
                                   "-c", "advice.detachedHead=false", "-c", "core.symlinks=true"};
  argv.insert(argv.end(), args.begin(), args.end());
  // No system or user config (a hook path, an `ext::` transport, credentials), no prompt,
  // no ssh question on a terminal.
  std::vector<std::string> env = {"PATH=/usr/bin:/bin", "HOME=" + home, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
                                  "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=/bin/false", "GIT_ALLOW_PROTOCOL=file:https:http:ssh:git",
                                  "GIT_SSH_COMMAND=ssh -oBatchMode=yes", "LC_ALL=C"};
  if (auto auth = split_userinfo(repo).basic_auth; !auth.empty())
    env.insert(env.end(), {"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.extraHeader", "GIT_CONFIG_VALUE_0=Authorization: Basic " + auth});
  auto run = sys::run_program(argv, dir, env, "", kGitTimeoutS, kGitMaxOutput, kGitMaxOutput);
  if (run.status == -1)
    return fail(make_error(ErrorCode::kUnavailable, "manifest entry " + entry + ": git is not installed (" + run.err + ")",
                           "install git (apt-get install git)"));
  if (run.timed_out) return fail(make_error(ErrorCode::kTimeout, "manifest entry " + entry + ": git " + args[0] + " of " + shown_repo(repo) +
                                                                     " took more than " + std::to_string(int(kGitTimeoutS)) + " s"));
  if (!WIFEXITED(run.status) || WEXITSTATUS(run.status) != 0) {
    std::string err = run.err;
    while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
    if (auto nl = err.rfind('\n'); nl != std::string::npos) err = err.substr(nl + 1);  // git's last word is its reason
    return fail(make_error(ErrorCode::kInvalidArgument,
                           "manifest entry " + entry + ": git " + args[0] + " of " + shown_repo(repo) + " failed: " + shown_repo(err)));
  }
  if (out) *out = run.out;
  return {};
}

bool looks_like_commit(const std::string& ref) {
  return ref.size() >= 7 && ref.size() <= 40 && ref.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// Clones `e`'s repository into `dir` at its ref: a branch or tag shallowly, a commit by a
// full clone and a detached checkout.
Result<void> clone(const WorkspaceEntry& e, const std::string& dir, const std::string& home) {
  if (e.ref.empty() || !looks_like_commit(e.ref)) {
    std::vector<std::string> args = {"clone", "--quiet", "--no-tags", "--depth", "1"};
    if (!e.ref.empty()) args.insert(args.end(), {"--branch", e.ref});
    args.insert(args.end(), {"--", split_userinfo(e.source).url, dir});
    return run_git(e.path, args, "", home, e.source);
  }
  NSBOX_CHECK(run_git(e.path, {"clone", "--quiet", "--no-checkout", "--", split_userinfo(e.source).url, dir}, "", home, e.source));
  std::string sha;
  NSBOX_CHECK(run_git(e.path, {"rev-parse", "--verify", "--quiet", "--end-of-options", e.ref + "^{commit}"}, dir, home, e.source, &sha));
  while (!sha.empty() && sha.back() == '\n') sha.pop_back();
  return run_git(e.path, {"checkout", "--quiet", "--detach", sha}, dir, home, e.source);
}

}  // namespace

WorkspaceSources::WorkspaceSources(WorkspaceSources&& other) noexcept
    : scratch_(std::move(other.scratch_)), trees_(std::move(other.trees_)) {
  other.scratch_.clear();
}

WorkspaceSources::~WorkspaceSources() {
  if (!scratch_.empty()) (void)files::remove_tree(scratch_);
}

Result<WorkspaceSources> WorkspaceSources::prepare(const std::vector<WorkspaceEntry>& entries, const std::string& scratch_parent) {
  WorkspaceSources s;
  for (const auto& e : entries) {
    std::string tree;
    if (e.kind == Kind::kLocalFile || e.kind == Kind::kLocalDir) {
      tree = e.source;
    } else if (e.kind == Kind::kGitRepo) {
      if (s.scratch_.empty()) {
        std::string dir = scratch_parent + "/manifest-" + sys::random_hex(6);
        if (::mkdir(dir.c_str(), 0700) != 0) return fail(sys_error("mkdir " + dir));
        s.scratch_ = dir;
      }
      // A repository on this host is a path like a local_dir's: no symlink anywhere in it.
      if (e.source.starts_with("/")) NSBOX_CHECK(open_source(e.path, e.source, O_RDONLY | O_DIRECTORY));
      std::string checkout = s.scratch_ + "/" + std::to_string(s.trees_.size());
      NSBOX_CHECK(clone(e, checkout, s.scratch_));
      tree = e.subpath.empty() ? checkout : checkout + "/" + e.subpath;
      if (!e.subpath.empty() && !files::exists(tree))
        return fail(refused(e.path, "subpath " + e.subpath + " is not in " + shown_repo(e.source) +
                                        (e.ref.empty() ? "" : " at " + e.ref)));
    }
    if (!tree.empty()) NSBOX_CHECK(check_source(e, tree));
    s.trees_.push_back(std::move(tree));
  }
  return s;
}

Result<void> WorkspaceSources::write(const SandboxFs& fs, const std::vector<WorkspaceEntry>& entries) const {
  const std::string workspace = fs.workspace() + "/";
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    std::string dest = workspace + e.path;
    const std::string what = "manifest entry " + e.path;
    if (e.kind == Kind::kDir) {
      NSBOX_CHECK_CTX(fs.make_dir(dest, true, e.mode), what);
      continue;
    }
    if (e.kind == Kind::kFile) {
      NSBOX_CHECK_CTX(fs.write_bytes(dest, e.content, e.mode), what);
      continue;
    }
    // A copied file keeps its own permission bits; the entry's mode is the top's.
    TreeVisit visit;
    visit.dir = [&](const std::string& rel, const struct stat&) -> Result<void> {
      NSBOX_CHECK_CTX(fs.make_dir(rel.empty() ? dest : dest + "/" + rel, true, rel.empty() ? e.mode : 0755), what);
      return {};
    };
    visit.file = [&](const std::string& rel, int fd, const struct stat& st) -> Result<void> {
      mode_t mode = rel.empty() ? e.mode : (st.st_mode & 0777);
      NSBOX_CHECK_CTX(fs.write(rel.empty() ? dest : dest + "/" + rel, fd, static_cast<uint64_t>(st.st_size), mode), what);
      return {};
    };
    NSBOX_CHECK(walk_source(e.path, trees_.at(i), e.kind == Kind::kGitRepo, visit));
  }
  return {};
}

}  // namespace nsbox
