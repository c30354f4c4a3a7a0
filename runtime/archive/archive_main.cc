// nsbox-archive: packs a volume's tree into a snapshot archive, or unpacks one into a
// volume, for the nsbox command and the server (runtime/client/snapshot_store.h). A
// program of its own so that libarchive stays out of the static nsbox and supervisor,
// and so that unpacking runs as the sandbox user, holding nothing of the caller's.
//
//   nsbox-archive pack   (--image IMG | --dir DIR) [--subdir REL] (--out FILE | --out-fd N) [--skip REL]... [limits]
//                        (--subdir: only that directory of the volume, reached without
//                        following a link; --out-fd: to an fd it was given, a stream)
//   nsbox-archive unpack (--image IMG | --dir DIR) --archive FILE --uid U --gid G [limits]
//                        (into a new volume: a restore that replaces a workspace unpacks
//                        beside it and swaps, runtime/client/snapshot_store.cc)
//   nsbox-archive check  --archive FILE --uid U --gid G [limits]
//                        (every member, nothing written)
//   nsbox-archive digest (--image IMG | --dir DIR) [--skip REL]... [limits]
//                        (pack's report, the archive written nowhere: a live fingerprint)
//   nsbox-archive extract --archive FILE --dir DIR [--format tar|zip] [--replace yes] [limits]
//                        (a caller's archive into a directory: `fs:extract`, run *inside*
//                        the sandbox, as its user, in its namespaces: Runtime::extract;
//                        --replace: the archive becomes the directory's whole content)
//   nsbox-archive layer  --archive BLOB [--dir DIR] --uid U --gid G [limits]
//                        (an image's layer, gzip, zstd or none: its diff_id in "sha256",
//                        and with --dir its tree unpacked there: runtime/images; rules in
//                        image_layer.h)
//   nsbox-archive merge  --layer DIR... --dir OUT --uid U --gid G
//                        (an image's root from its unpacked layers, bottom first: hard
//                        links and whiteouts, image_tree.h; "members": entries linked)
//   limits: --max-members N --max-bytes N [--max-apparent-bytes N: sizes with their holes]
//
// Archives are read as U:G only (the sandbox user; as root, giving them is required): the
// files are opened first, then every id dropped, then the bytes parsed.
//
// Whatever it reads, it holds at most kMaxMemory (RLIMIT_DATA): libarchive builds a sparse
// map's list before nsbox sees the entry, ~12 bytes of memory for each byte of map, so a
// crafted 4 GiB archive from a store would take ~50 GB of the host's memory.
//
// On success one JSON line on stdout: {"members", "bytes", "skipped", "left_out", "sha256"}. On
// failure the error on stderr, and the exit status says its kind: 2 a refused member, 3 a
// limit, 1 anything else (never read from the message, which holds names the sandbox chose).
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <grp.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "isolation/sys/files.h"
#include "isolation/sys/syscall.h"
#include "isolation/sys/unique_fd.h"
#include "mounts/volume_image.h"
#include "runtime/archive/image_layer.h"
#include "runtime/archive/image_tree.h"
#include "runtime/archive/tree_archive.h"

namespace {

using namespace nsbox;

int failed(const Error& e) {
  std::fprintf(stderr, "%s\n", e.message.c_str());
  if (!e.hint.empty()) std::fprintf(stderr, "hint: %s\n", e.hint.c_str());
  return e.code == ErrorCode::kInvalidArgument ? 2 : e.code == ErrorCode::kLimitExceeded ? 3 : 1;
}


struct Args {
  std::string mode;
  std::map<std::string, std::string> values;
  std::set<std::string> skip;
  std::vector<std::string> layers;  // merge's --layer, in order
};

Result<Args> parse(int argc, char** argv) {
  Args a;
  if (argc < 2) return fail(make_error(ErrorCode::kInvalidArgument, "usage: nsbox-archive pack|unpack ..."));
  a.mode = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc || !flag.starts_with("--")) return fail(make_error(ErrorCode::kInvalidArgument, "bad argument '" + flag + "'"));
    std::string value = argv[++i];
    if (flag == "--skip") a.skip.insert(value);
    else if (flag == "--layer") a.layers.push_back(value);
    else a.values[flag.substr(2)] = value;
  }
  return a;
}

Result<uint64_t> number(const Args& a, const std::string& key, uint64_t fallback) {
  auto it = a.values.find(key);
  if (it == a.values.end()) return fallback;
  char* end = nullptr;
  unsigned long long v = std::strtoull(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end != '\0') return fail(make_error(ErrorCode::kInvalidArgument, "--" + key + " takes a number"));
  return static_cast<uint64_t>(v);
}

// The volume's root: an image mounted privately (a detached mount, nobody else's), or
// a directory (rootless).
Result<UniqueFd> open_root(const Args& a) {
  if (auto it = a.values.find("image"); it != a.values.end()) return volume_image::open_privately(it->second);
  if (auto it = a.values.find("dir"); it != a.values.end()) {
    UniqueFd fd(::open(it->second.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) return fail(sys_error("open " + it->second));
    return fd;
  }
  return fail(make_error(ErrorCode::kInvalidArgument, "--image or --dir is needed"));
}

// --subdir REL beneath the volume's root: no link followed, no other mount entered.
Result<UniqueFd> open_subdir(UniqueFd root, const Args& a) {
  auto it = a.values.find("subdir");
  if (it == a.values.end() || it->second.empty()) return root;
  open_how how{};
  how.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  UniqueFd fd(static_cast<int>(::syscall(SYS_openat2, root.get(), it->second.c_str(), &how, sizeof how)));
  if (!fd) return fail(sys_error("open the directory " + it->second + " of the volume (no link is followed)"));
  return fd;
}

Result<UniqueFd> open_archive(const Args& a) {
  if (!a.values.count("archive")) return fail(make_error(ErrorCode::kInternal, a.mode + " needs --archive FILE"));
  const std::string& path = a.values.at("archive");
  UniqueFd in(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!in) return fail(sys_error("open " + path));
  return in;
}

// From here on, the sandbox user's rights only (--uid, --gid): what an archive makes is
// theirs, nothing it names can reach what they could not, and the parser of bytes a store
// handed over holds nothing of root's. Never root: without the ids, nothing is read.
Result<void> become_reader(const Args& a) {
  uid_t uid = static_cast<uid_t>(NSBOX_TRY(number(a, "uid", ::getuid())));
  gid_t gid = static_cast<gid_t>(NSBOX_TRY(number(a, "gid", ::getgid())));
  if (uid == 0 || gid == 0)
    return fail(make_error(ErrorCode::kInternal, a.mode + " reads an archive as the sandbox user, never as root: give --uid and --gid"));
  if (::geteuid() == 0 && ::setgroups(0, nullptr) != 0) return fail(sys_error("setgroups"));
  if (::setresgid(gid, gid, gid) != 0) return fail(sys_error("setresgid " + std::to_string(gid)));
  if (::setresuid(uid, uid, uid) != 0) return fail(sys_error("setresuid " + std::to_string(uid)));
  return {};
}

// The mount points strictly under `dir` (an absolute path of this process's view), as
// paths relative to it, from its mount table: bucket mounts inside a workspace.
Result<std::set<std::string>> mounts_under(const std::string& dir) {
  std::set<std::string> out;
  auto table = NSBOX_TRY(files::read_file("/proc/self/mountinfo", 4 << 20));
  const std::string prefix = dir == "/" ? "/" : dir + "/";
  size_t at = 0;
  while (at < table.size()) {
    size_t end = table.find('\n', at);
    if (end == std::string::npos) end = table.size();
    std::string line = table.substr(at, end - at);
    at = end + 1;
    // id parent major:minor root MOUNT_POINT ...; the kernel writes space, tab, newline
    // and backslash in a path as \ooo.
    std::istringstream fields(line);
    std::string escaped, path;
    for (int i = 0; i < 5; ++i) fields >> escaped;
    for (size_t i = 0; i < escaped.size(); ++i) {
      bool octal = escaped[i] == '\\' && i + 3 < escaped.size();
      if (octal) {
        path += static_cast<char>(((escaped[i + 1] - '0') << 6) | ((escaped[i + 2] - '0') << 3) | (escaped[i + 3] - '0'));
        i += 3;
      } else {
        path += escaped[i];
      }
    }
    if (path.size() > prefix.size() && path.starts_with(prefix)) out.insert(path.substr(prefix.size()));
  }
  return out;
}

// The mount points of `mounts` inside its entry `name`, relative to it.
std::set<std::string> mounts_inside(const std::set<std::string>& mounts, const std::string& name) {
  std::set<std::string> out;
  for (const auto& m : mounts)
    if (m.size() > name.size() + 1 && m.starts_with(name + "/")) out.insert(m.substr(name.size() + 1));
  return out;
}

// Moves every entry of `from` but those named in `keep` into `to`. `mounts` are the mount
// points (relative) on the workspace's side of the move, whichever it is: a mount point
// never moves (and what would land on one stays behind), and a directory holding one is not
// moved whole (its mount would go with it) but merged, entry by entry, into a directory of
// its name on the other side. A mount the table does not show still cannot move (EBUSY),
// nor can anything be moved over one (EBUSY, or EISDIR, ENOTEMPTY, EEXIST for the mount's
// directory): that entry stays where it is.
Result<void> move_entries(int from, int to, const std::set<std::string>& keep, const std::set<std::string>& mounts,
                          const std::string& shown) {
  for (const auto& name : NSBOX_TRY(files::list_dir_at(from, shown))) {
    if (keep.count(name) || mounts.count(name)) continue;
    if (auto inside = mounts_inside(mounts, name); !inside.empty()) {
      UniqueFd sub_from(::openat(from, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub_from) continue;  // not a directory on this side: it cannot take the mount's place
      struct stat st{};
      if (::fstat(sub_from.get(), &st) != 0) return fail(sys_error("stat " + shown + "/" + name));
      if (::mkdirat(to, name.c_str(), st.st_mode & 07777) != 0 && errno != EEXIST) return fail(sys_error("mkdir " + name));
      UniqueFd sub_to(::openat(to, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub_to) return fail(sys_error("open " + name + " (it holds a mount)"));
      (void)::fchmod(sub_to.get(), st.st_mode & 07777);  // the incoming directory's mode; not ours to insist on
      NSBOX_CHECK(move_entries(sub_from.get(), sub_to.get(), {}, inside, shown + "/" + name));
      continue;
    }
    if (::renameat(from, name.c_str(), to, name.c_str()) != 0 && errno != EBUSY && errno != EISDIR &&
        errno != ENOTEMPTY && errno != EEXIST)
      return fail(sys_error("move " + shown + "/" + name));
  }
  return {};
}

// The archive as the directory's whole content. Unpacked into a directory of its own
// inside it (a refused or failed archive leaves the old content as it was), then the old
// entries are moved out and the new ones in, each a rename: the directory is neither the
// old nor the new content only for that long, and a failed move puts the old content
// back. The old content is removed after; bucket mounts inside stay where they are (the
// directories holding them are merged, not moved), and a member at a mount's place is
// dropped. It costs the volume both contents
// while it runs.
Result<snapshot::ArchiveSummary> replace_contents(int dir, const std::string& dir_path, int archive,
                                                   const snapshot::ArchiveLimits& limits, const snapshot::ArchiveSource& source) {
  const std::set<std::string> mounts = NSBOX_TRY(mounts_under(dir_path));
  const std::string incoming = ".nsbox-incoming-" + sys::random_hex(6), outgoing = ".nsbox-outgoing-" + sys::random_hex(6);
  const std::set<std::string> ours = {incoming, outgoing};
  auto make = [&](const std::string& name) -> Result<UniqueFd> {
    if (::mkdirat(dir, name.c_str(), 0700) != 0) return fail(sys_error("mkdir " + name));
    UniqueFd fd(::openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) return fail(sys_error("open " + name));
    return fd;
  };
  UniqueFd in = NSBOX_TRY(make(incoming));
  auto swapped = [&]() -> Result<snapshot::ArchiveSummary> {
    if (::fchdir(in.get()) != 0) return fail(sys_error("fchdir to " + incoming));
    auto summary = NSBOX_TRY(snapshot::unpack(archive, limits, source));
    UniqueFd out = NSBOX_TRY(make(outgoing));
    auto moved = move_entries(dir, out.get(), ours, mounts, "the directory");
    if (moved) moved = move_entries(in.get(), dir, {}, mounts, incoming);
    if (!moved) {  // the old content back, as much of it as moves
      (void)move_entries(dir, in.get(), ours, mounts, "the directory");
      (void)move_entries(out.get(), dir, {}, mounts, outgoing);
      return fail(std::move(moved.error()));
    }
    return summary;
  }();
  (void)files::remove_tree_at(dir, incoming, incoming);  // the new content left over, or all of it
  if (swapped) {
    NSBOX_CHECK(files::remove_tree_at(dir, outgoing, outgoing));
    return swapped;
  }
  // The old content stays where a failed move back left it: never removed.
  if (::unlinkat(dir, outgoing.c_str(), AT_REMOVEDIR) != 0 && errno == ENOTEMPTY)
    return fail(std::move(swapped.error()).context("part of the old content is in " + outgoing));
  return swapped;
}

Result<snapshot::ArchiveSummary> run(const Args& a) {
  snapshot::ArchiveLimits limits{NSBOX_TRY(number(a, "max-members", 100000)), NSBOX_TRY(number(a, "max-bytes", 4ull << 30)),
                                 NSBOX_TRY(number(a, "max-apparent-bytes", 1ull << 50))};
  if (a.mode == "check") {
    UniqueFd in = NSBOX_TRY(open_archive(a));
    NSBOX_CHECK(become_reader(a));
    return snapshot::check(in.get(), limits);
  }
  if (a.mode == "layer") {
    image_layer::LayerLimits layer{NSBOX_TRY(number(a, "max-members", 1'000'000)), NSBOX_TRY(number(a, "max-bytes", 64ull << 30))};
    UniqueFd in = NSBOX_TRY(open_archive(a));
    UniqueFd dir;
    if (a.values.count("dir")) dir = NSBOX_TRY(open_root(a));
    NSBOX_CHECK(become_reader(a));
    ::umask(022);
    if (dir && ::fchdir(dir.get()) != 0) return fail(sys_error("fchdir to " + a.values.at("dir")));
    return image_layer::read(in.get(), layer, static_cast<bool>(dir));
  }
  if (a.mode == "merge") {
    std::vector<UniqueFd> layers;
    std::vector<int> fds;
    for (const auto& dir : a.layers) {
      layers.emplace_back(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!layers.back()) return fail(sys_error("open the layer " + dir));
      fds.push_back(layers.back().get());
    }
    UniqueFd out = NSBOX_TRY(open_root(a));
    NSBOX_CHECK(become_reader(a));
    auto merged = NSBOX_TRY(image_tree::merge(fds, out.get()));
    snapshot::ArchiveSummary summary;
    summary.members = merged.entries;
    summary.skipped = merged.removed;
    return summary;
  }
  UniqueFd root = NSBOX_TRY(open_subdir(NSBOX_TRY(open_root(a)), a));
  if (a.mode == "pack" && a.values.count("out-fd")) {
    int out = static_cast<int>(NSBOX_TRY(number(a, "out-fd", 0)));
    if (out <= 2) return fail(make_error(ErrorCode::kInvalidArgument, "--out-fd takes an fd past stderr"));
    return snapshot::pack(root.get(), out, a.skip, limits);
  }
  if (a.mode == "pack") {
    if (!a.values.count("out")) return fail(make_error(ErrorCode::kInvalidArgument, "pack needs --out FILE or --out-fd N"));
    const std::string& path = a.values.at("out");
    UniqueFd out(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!out) return fail(sys_error("create " + path));
    auto summary = NSBOX_TRY(snapshot::pack(root.get(), out.get(), a.skip, limits));
    if (::fsync(out.get()) != 0) return fail(sys_error("fsync " + path));
    return summary;
  }
  if (a.mode == "digest") {
    UniqueFd out(::open("/dev/null", O_WRONLY | O_CLOEXEC));
    if (!out) return fail(sys_error("open /dev/null"));
    return snapshot::pack(root.get(), out.get(), a.skip, limits);
  }
  if (a.mode == "unpack" || a.mode == "extract") {
    snapshot::ArchiveSource source;
    if (a.mode == "extract") {
      std::string format = a.values.count("format") ? a.values.at("format") : "tar";
      if (format != "tar" && format != "zip") return fail(make_error(ErrorCode::kInvalidArgument, "--format takes tar or zip, not '" + format + "'"));
      source = {format == "zip", "the archive", "archive_limits' max_members raises the limit", "archive_limits' max_bytes raises the limit",
                /*hard_links=*/false};
    }
    UniqueFd in = NSBOX_TRY(open_archive(a));
    NSBOX_CHECK(become_reader(a));
    // Every member checked before anything is written: a refused archive writes nothing.
    NSBOX_CHECK(snapshot::check(in.get(), limits, source));
    ::umask(022);
    if (a.values.count("replace")) return replace_contents(root.get(), a.values.at("dir"), in.get(), limits, source);
    if (::fchdir(root.get()) != 0) return fail(sys_error("fchdir to the volume"));
    return snapshot::unpack(in.get(), limits, source);
  }
  return fail(make_error(ErrorCode::kInvalidArgument, "unknown mode '" + a.mode + "'"));
}

}  // namespace

// Packing a file of 65,536 runs holds ~11 MiB of map, and the rest (the hash's queue,
// buffers, a directory's names, two threads' stacks) tens of MiB.
constexpr rlim_t kMaxMemory = 256 << 20;

int main(int argc, char** argv) {
  const rlimit memory{kMaxMemory, kMaxMemory};
  if (::setrlimit(RLIMIT_DATA, &memory) != 0) return failed(sys_error("setrlimit RLIMIT_DATA"));
  auto args = parse(argc, argv);
  if (!args) return failed(args.error());
  auto summary = run(*args);
  if (!summary) return failed(summary.error());
  nlohmann::json j = {{"members", summary->members}, {"bytes", summary->bytes}, {"skipped", summary->skipped}, {"left_out", summary->left_out},
                    {"sha256", summary->sha256}};
  // Names the sandbox chose need not be UTF-8.
  std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  return 0;
}
