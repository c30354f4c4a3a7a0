// Building the planned root inside the child, then pivot_root into it.
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "isolation/rootfs.h"
#include "isolation/userns.h"

#include "isolation/sys/files.h"
#include "isolation/sys/syscall.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox::rootfs {
namespace {

unsigned long mount_flags(unsigned attrs) {
  unsigned long f = 0;
  if (attrs & MOUNT_ATTR_NOSUID) f |= MS_NOSUID;
  if (attrs & MOUNT_ATTR_NODEV) f |= MS_NODEV;
  if (attrs & MOUNT_ATTR_NOEXEC) f |= MS_NOEXEC;
  return f;
}

Result<void> set_attrs(int dfd, const char* path, unsigned flags, unsigned attrs, const std::string& shown) {
  if (!attrs) return {};
  mount_attr attr{};
  attr.attr_set = attrs;
  if (::mount_setattr(dfd, path, flags, &attr, sizeof attr) != 0)
    return fail(sys_error("mount_setattr " + shown));
  return {};
}

// mkdir -p, trying the deepest directory first: its parents usually exist already.
Result<void> make_dirs_in_child(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) return {};
  if (errno != ENOENT) return fail(sys_error("mkdir " + path));
  auto slash = path.rfind('/');
  if (slash == 0 || slash == std::string::npos) return fail(sys_error("mkdir " + path));
  NSBOX_CHECK(make_dirs_in_child(path.substr(0, slash)));
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return fail(sys_error("mkdir " + path));
  return {};
}

// `make` (true: done; false: failed, errno set) tried first, and again after the parent
// directories of `path` only when they are missing (ENOENT): each try is a syscall on the
// one-shot path, and the parents are usually there.
template <typename Make>
Result<void> make_with_parents(const std::string& path, const std::string& what, Make make) {
  if (make()) return {};
  if (errno != ENOENT) return fail(sys_error(what));
  NSBOX_CHECK(make_dirs_in_child(path.substr(0, path.rfind('/'))));
  if (!make()) return fail(sys_error(what));
  return {};
}

// A mount point of the same type as what goes on it, unless the path is already there
// (a file inside an earlier read-only bind, such as /etc/passwd: EEXIST comes before
// EROFS).
Result<void> make_mount_point(const std::string& path, bool directory) {
  if (directory) return make_dirs_in_child(path);
  return make_with_parents(path, "create mount point " + path, [&] {
    int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    return fd >= 0 ? ::close(fd) == 0 : errno == EEXIST;
  });
}

}  // namespace

// Clones every host source before anything is mounted: nothing mounted later (the staging
// tmpfs included) can hide or replace a source.
Result<SourceTrees> clone_sources_in_child(const std::vector<Step>& steps) {
  // Private, both ways: nothing we mount reaches the host, and nothing the host mounts
  // later under a bound tree (a writable mount under /usr, say) reaches the sandbox
  // without our read-only/nosuid/nodev flags.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return fail(sys_error("make / rprivate"));
  SourceTrees trees(steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    if (s.kind == StepKind::kImageRoot) {
      // An image's tree is in a directory only root may walk to: held by an fd while the
      // child still may (the overlay takes it through /proc/self/fd).
      trees[i].reset(::open(s.source.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
      if (!trees[i]) return fail(sys_error("open the image tree " + s.source));
      continue;
    }
    if (s.kind != StepKind::kBindTree) continue;
    UniqueFd fd(::open_tree(AT_FDCWD, s.source.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE));
    if (!fd) {
      if (s.optional && errno == ENOENT) continue;
      return fail(sys_error("open_tree " + s.source + " (for " + s.target + ")"));
    }
    NSBOX_CHECK(set_attrs(fd.get(), "", AT_EMPTY_PATH | AT_RECURSIVE, s.attrs, s.source));
    trees[i] = std::move(fd);
  }
  return trees;
}

namespace {

// A path as an overlay's lowerdir option takes it: ':' separates layers, ',' options.
std::string overlay_escaped(const std::string& path) {
  std::string out;
  for (char c : path) {
    if (c == '\\' || c == ':' || c == ',') out += '\\';
    out += c;
  }
  return out;
}

// The overlay's own layer is a small tmpfs of its own, filled, stacked over the host's
// tree, then detached: the overlay keeps a private clone of each layer, so nothing of it
// is left in the sandbox's mount table but the overlay itself.
Result<void> mount_overlay(const Step& s, const std::string& path, const std::string& staging) {
  const std::string layer = staging + "/.nsbox-layer";
  NSBOX_CHECK(make_dirs_in_child(layer));
  if (::mount("tmpfs", layer.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=1048576,nr_inodes=64,mode=0755") != 0)
    return fail(sys_error("mount the layer of " + s.target));
  for (const LayerFile& f : s.layer) {
    std::string file = layer + "/" + f.name;
    UniqueFd fd(::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (!fd) return fail(sys_error("create " + s.target + "/" + f.name));
    NSBOX_CHECK(files::write_all(fd.get(), f.data, s.target + "/" + f.name));
  }
  NSBOX_CHECK(make_dirs_in_child(path));
  std::string options = "lowerdir=" + overlay_escaped(layer) + ":" + overlay_escaped(s.source);
  if (::mount("overlay", path.c_str(), "overlay", MS_RDONLY | mount_flags(s.attrs), options.c_str()) != 0)
    return fail(sys_error("mount an overlay of " + s.source + " on " + s.target)
                    .with_hint("nsbox needs overlayfs in user namespaces (`modprobe overlay`; `nsbox doctor` checks it)"));
  if (::umount2(layer.c_str(), MNT_DETACH) != 0) return fail(sys_error("detach the layer of " + s.target));
  if (::rmdir(layer.c_str()) != 0) return fail(sys_error("rmdir " + layer));
  return set_attrs(AT_FDCWD, path.c_str(), 0, s.attrs, s.target);
}

// `name` beneath `parent` as a directory, made if missing. The home's content is the
// sandbox's: a file or a link it put there is moved aside (kept, never followed) and a
// directory made in its place.
Result<UniqueFd> directory_beneath(int parent, const std::string& name, const std::string& shown) {
  auto open_dir = [&] {
    if (::mkdirat(parent, name.c_str(), 0755) != 0 && errno != EEXIST) return UniqueFd();
    return UniqueFd(::openat(parent, name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  };
  if (UniqueFd dir = open_dir()) return dir;
  if (errno != ENOTDIR && errno != ELOOP) return fail(sys_error("make the directory " + shown));
  std::string aside = name + ".moved-" + sys::random_hex(4);
  if (::renameat(parent, name.c_str(), parent, aside.c_str()) != 0) return fail(sys_error("move " + shown + " aside"));
  if (UniqueFd dir = open_dir()) return dir;
  return fail(sys_error("make the directory " + shown));
}

// The workspace root: the directory `source` of the tree at `data` (the home), walked a
// name at a time, bound at `target` (where it already is, for a root under the home: then
// it cannot be removed from inside, as /home/user cannot).
Result<void> bind_workspace(const Step& s, const std::string& staging) {
  UniqueFd dir(::open((staging + s.data).c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) return fail(sys_error("open " + s.data));
  std::string shown = s.data;
  size_t start = 0;
  while (start <= s.source.size()) {
    size_t end = std::min(s.source.find('/', start), s.source.size());
    std::string name = s.source.substr(start, end - start);
    shown += "/" + name;
    dir = NSBOX_TRY(directory_beneath(dir.get(), name, shown));
    start = end + 1;
  }
  UniqueFd tree(::open_tree(dir.get(), "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH));
  if (!tree) return fail(sys_error("open_tree " + shown + " (the workspace " + s.target + ")"));
  const std::string path = staging + s.target;
  NSBOX_CHECK(make_dirs_in_child(path));
  if (::move_mount(tree.get(), "", AT_FDCWD, path.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0)
    return fail(sys_error("move_mount " + shown + " to " + s.target));
  return {};
}

// An image root (kImageRoot, before anything else): the image's tree (held by `tree`)
// under the sandbox's writable layer, an overlay mounted where the root is built. The
// layer's upper and work directories are in the home volume's `s.data` directory (`home`:
// the home's cloned tree), which the sandbox user owns and the sandbox never sees (a mask
// covers it). Mounted in the sandbox's user namespace, the overlay keeps its own attributes
// in user.* xattrs (userxattr); whiteouts are 0/0 devices in the layer; nothing of it ever
// reaches the image's tree.
Result<void> mount_image_root(const Step& s, int tree, int home, const std::string& staging) {
  if (home < 0) return fail(make_error(ErrorCode::kInvalidArgument, "an image sandbox needs a home volume for its writable layer"));
  if (::mkdirat(home, s.data.c_str(), 0700) != 0 && errno != EEXIST) return fail(sys_error("mkdir the root layer " + s.data));
  UniqueFd layer(::openat(home, s.data.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!layer) return fail(sys_error("open the root layer " + s.data));
  for (const char* sub : {"upper", "work"}) {
    UniqueFd dir(::openat(layer.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir || (::mkdirat(dir.get(), sub, 0700) != 0 && errno != EEXIST)) return fail(sys_error(std::string("mkdir the root layer's ") + sub));
  }
  const std::string fd_path = "/proc/self/fd/";
  std::string options = "lowerdir=" + fd_path + std::to_string(tree) + ",upperdir=" + fd_path + std::to_string(layer.get()) +
                        "/upper,workdir=" + fd_path + std::to_string(layer.get()) + "/work,userxattr";
  if (::mount("overlay", staging.c_str(), "overlay", MS_NOSUID | MS_NODEV, options.c_str()) != 0)
    return fail(sys_error("mount the image " + s.source + " as the root (an overlay)")
                    .with_hint("nsbox needs overlayfs in user namespaces (Linux 5.11 or later; `modprobe overlay`)"));
  return {};
}

// The sandbox's own `s.target` (a file of /etc) with `s.data`, made beneath the root
// without following a link: the image may hold one there, which is replaced.
Result<void> write_own_file(const Step& s, const std::string& staging) {
  UniqueFd root(::open(staging.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root) return fail(sys_error("open the root being built"));
  const std::string rel = s.target.substr(1);
  const std::string parent = rel.substr(0, rel.rfind('/')), name = rel.substr(rel.rfind('/') + 1);
  open_how how{};
  how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  if (::mkdirat(root.get(), parent.c_str(), 0755) != 0 && errno != EEXIST) return fail(sys_error("mkdir /" + parent));
  UniqueFd dir(static_cast<int>(::syscall(SYS_openat2, root.get(), parent.c_str(), &how, sizeof how)));
  if (!dir) return fail(sys_error("open /" + parent + " of the image (a link there is refused)"));
  if (::unlinkat(dir.get(), name.c_str(), 0) != 0 && errno != ENOENT) return fail(sys_error("replace " + s.target));
  UniqueFd fd(::openat(dir.get(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd) return fail(sys_error("create " + s.target));
  return files::write_all(fd.get(), s.data, s.target);
}

// In an image's root, before a step uses its target by path: every directory on the way
// from the root (and the target itself, when `whole`) made a real directory, a link or
// a file the image had there removed first (in the sandbox's own layer; the image never
// changes); without `whole`, a link at the target itself is removed and nothing made
// there. Built before the pivot, a path through the image's absolute link would resolve
// on the host: a mount could land outside the root, a directory be made on the host.
// Nothing else runs in the namespace while the root is built, so what this walk leaves
// is what the step finds.
Result<void> real_dirs_beneath(const std::string& staging, const std::string& target, bool whole) {
  UniqueFd dir(::open(staging.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dir) return fail(sys_error("open the root being built"));
  std::string rel = target.substr(1);
  size_t start = 0;
  while (start < rel.size()) {
    size_t end = std::min(rel.find('/', start), rel.size());
    std::string name = rel.substr(start, end - start), shown = "/" + rel.substr(0, end);
    struct stat st{};
    if (end == rel.size() && !whole) {
      if (::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
        UniqueFd writable(::openat(dir.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        if (!writable || ::unlinkat(writable.get(), name.c_str(), 0) != 0) return fail(sys_error("remove the link " + shown + " of the image"));
      }
      return {};
    }
    if (::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode)) {
      UniqueFd writable(::openat(dir.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      if (!writable || ::unlinkat(writable.get(), name.c_str(), 0) != 0) return fail(sys_error("replace " + shown + " of the image by a directory"));
    }
    if (::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      UniqueFd writable(::openat(dir.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      if (!writable || (::mkdirat(writable.get(), name.c_str(), 0755) != 0 && errno != EEXIST)) return fail(sys_error("mkdir " + shown));
    }
    UniqueFd next(::openat(dir.get(), name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next) return fail(sys_error("open " + shown + " (no link is followed)"));
    dir = std::move(next);
    start = end + 1;
  }
  return {};
}

// Whether a step makes a directory at its target or mounts on one it makes (the whole
// path must then be real directories), rather than a file or a link it makes there, or a
// mount on what only may be there (a mask, a read-only bind).
bool targets_directory(const Step& s, const UniqueFd& tree) {
  switch (s.kind) {
    case StepKind::kSymlink: case StepKind::kFile: case StepKind::kMaskWithNull: case StepKind::kImageRoot:
    case StepKind::kMaskDir: case StepKind::kReadOnlyAgain: case StepKind::kReadOnlyFinal:
      return false;
    case StepKind::kBindTree: {
      struct stat st{};
      return tree && ::fstat(tree.get(), &st) == 0 && S_ISDIR(st.st_mode);
    }
    default: return true;
  }
}

Result<void> run_step(const Step& s, UniqueFd& tree, const std::string& staging) {
  const std::string path = staging + s.target;
  const char* p = path.c_str();
  auto exists = [&] { struct stat st{}; return ::lstat(p, &st) == 0; };
  switch (s.kind) {
    case StepKind::kBindTree: {
      if (!tree) return {};  // optional and missing
      struct stat st{};
      if (::fstat(tree.get(), &st) != 0) return fail(sys_error("fstat clone of " + s.source));
      auto made = make_mount_point(path, S_ISDIR(st.st_mode));
      if (!made && s.optional && made.error().sys_errno == EROFS) return {};  // inside a read-only bind
      NSBOX_CHECK(made);
      if (::move_mount(tree.get(), "", AT_FDCWD, p, MOVE_MOUNT_F_EMPTY_PATH) != 0)
        return fail(sys_error("move_mount " + s.source + " to " + s.target));
      return {};
    }
    case StepKind::kSymlink:
      return make_with_parents(path, "symlink " + s.target + " -> " + s.source, [&] { return ::symlink(s.source.c_str(), p) == 0; });
    case StepKind::kTmpfs:
      NSBOX_CHECK(make_dirs_in_child(path));
      if (::mount("tmpfs", p, "tmpfs", mount_flags(s.attrs), s.data.c_str()) != 0)
        return fail(sys_error("mount tmpfs (" + s.data + ") on " + s.target));
      return {};
    case StepKind::kProc:
      NSBOX_CHECK(make_dirs_in_child(path));
      if (::mount("proc", p, "proc", mount_flags(s.attrs), nullptr) != 0) return fail(sys_error("mount proc on " + s.target));
      return {};
    case StepKind::kDevpts:
      NSBOX_CHECK(make_dirs_in_child(path));
      if (::mount("devpts", p, "devpts", mount_flags(s.attrs), s.data.c_str()) != 0)
        return fail(sys_error("mount devpts on " + s.target));
      return {};
    case StepKind::kMaskWithNull:
      if (!exists()) return {};
      if (::mount((staging + "/dev/null").c_str(), p, nullptr, MS_BIND, nullptr) != 0)
        return fail(sys_error("mask " + s.target + " with /dev/null"));
      return set_attrs(AT_FDCWD, p, 0, MOUNT_ATTR_RDONLY, s.target);
    case StepKind::kMaskDir:
      if (!exists()) return {};
      if (::mount("tmpfs", p, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4096,nr_inodes=1,mode=0555") != 0)
        return fail(sys_error("mask directory " + s.target));
      return {};
    case StepKind::kReadOnlyAgain:
      if (!exists()) return {};
      if (::mount(p, p, nullptr, MS_BIND | MS_REC, nullptr) != 0) return fail(sys_error("bind " + s.target + " onto itself"));
      return set_attrs(AT_FDCWD, p, AT_RECURSIVE, s.attrs, s.target);
    case StepKind::kReadOnlyFinal:
      return set_attrs(AT_FDCWD, p, 0, MOUNT_ATTR_RDONLY, s.target);
    case StepKind::kDir:
      return make_dirs_in_child(path);
    case StepKind::kOverlay:
      return mount_overlay(s, path, staging);
    case StepKind::kWorkspace:
      return bind_workspace(s, staging);
    case StepKind::kImageRoot:
      return {};  // mounted first, by build_in_child
    case StepKind::kFile:
      return write_own_file(s, staging);
    case StepKind::kShared:
      // The mount's root, bound just above (no link to follow): given to kSystemUid, which
      // no command runs as, since a sticky directory's owner may remove anyone's files.
      if (::chown(p, userns::kSystemUid, userns::kSystemGid) != 0 || ::chmod(p, 01777) != 0)
        return fail(sys_error("share " + s.target + " between the sandbox's accounts (chown 999, chmod 1777)"));
      return {};
  }
  return {};
}

}  // namespace

Result<void> build_in_child(const std::vector<Step>& steps, SourceTrees& trees, const std::string& staging) {
  ::umask(022);
  const bool image = !steps.empty() && steps.front().kind == StepKind::kImageRoot;
  if (image) {
    int home = -1;
    for (size_t i = 0; i < steps.size(); ++i)
      if (steps[i].kind == StepKind::kBindTree && steps[i].target == kHome && trees[i]) home = trees[i].get();
    NSBOX_CHECK(mount_image_root(steps.front(), trees.front().get(), home, staging));
  }
  else if (::mount("tmpfs", staging.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=1048576,nr_inodes=4096,mode=0755") != 0)
    return fail(sys_error("mount root tmpfs on " + staging));
  for (size_t i = 0; i < steps.size(); ++i) {
    if (image && i > 0 && steps[i].target != "/") NSBOX_CHECK(real_dirs_beneath(staging, steps[i].target, targets_directory(steps[i], trees[i])));
    NSBOX_CHECK(run_step(steps[i], trees[i], staging));
  }

  // pivot_root(".", ".") stacks the old root on top of the new one; detaching "." then
  // drops it without needing a put_old directory (as runc and bubblewrap do).
  if (::chdir(staging.c_str()) != 0) return fail(sys_error("chdir " + staging));
  if (sys::pivot_root(".", ".") != 0) return fail(sys_error("pivot_root into " + staging));
  if (::umount2(".", MNT_DETACH) != 0) return fail(sys_error("detach the old root"));
  if (::chdir("/") != 0) return fail(sys_error("chdir / in the new root"));
  // The host's system is read-only; an image's root takes writes in its own layer.
  return set_attrs(AT_FDCWD, "/", 0, (image ? 0 : MOUNT_ATTR_RDONLY) | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, "/ (the sandbox root)");
}

}  // namespace nsbox::rootfs
