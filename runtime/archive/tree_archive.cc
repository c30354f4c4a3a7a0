#include "runtime/archive/tree_archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <unordered_set>
#include <vector>

#include "isolation/sys/files.h"
#include "isolation/sys/unique_fd.h"
#include "runtime/archive/hash_list.h"
#include "runtime/archive/libarchive_handles.h"
#include "runtime/archive/sparse_file.h"

namespace nsbox::snapshot {
namespace {

constexpr size_t kChunk = 1 << 20;
constexpr int kMaxDepth = 256;
constexpr size_t kMaxPath = 4096;  // a member's relative name
constexpr uid_t kSandboxUid = 1000;  // owners as the sandbox sees them

using archive_handles::Entry;
using archive_handles::Reader;
using archive_handles::Writer;

Error archive_error(archive* a, const std::string& what) {
  const char* text = archive_error_string(a);
  std::string message = what + ": " + (text ? text : "libarchive failed");
  // libarchive's text for a failed write(2) is "Write failed": the errno says why (a full
  // disk). Its own codes for a bad archive (EILSEQ on Linux) or a misuse (EINVAL) add
  // nothing to its text.
  int err = archive_errno(a);
  if (err > 0 && err != EILSEQ && err != EINVAL) message += std::string(": ") + std::strerror(err);
  return make_error(ErrorCode::kSystem, message);
}

Error refused(const std::string& member, const std::string& why) {
  return make_error(ErrorCode::kInvalidArgument, "archive member '" + member.substr(0, 256) + "' refused: " + why);
}

Error over_limit(const std::string& what, uint64_t limit) {
  return make_error(ErrorCode::kLimitExceeded, "the workspace has more than " + std::to_string(limit) + " " + what,
                    "NSBOX_SNAPSHOT_MAX_MEMBERS and NSBOX_SNAPSHOT_MAX_BYTES raise the limits");
}

// The archive's bytes go to a file and through the hash.
struct Sink {
  int fd;
  BackgroundHash hash;
  std::string error;
  bool discard = false;  // a refused archive's last blocks: written nowhere
};

la_ssize_t write_to_sink(archive*, void* data, const void* buf, size_t len) {
  auto* sink = static_cast<Sink*>(data);
  if (sink->discard) return static_cast<la_ssize_t>(len);
  std::string_view bytes(static_cast<const char*>(buf), len);
  if (auto w = files::write_all(sink->fd, bytes, "the snapshot"); !w) {
    sink->error = w.error().message;
    return -1;
  }
  sink->hash.update(bytes);
  return static_cast<la_ssize_t>(len);
}

class Packer {
 public:
  Packer(archive* a, const std::set<std::string>& skip, const ArchiveLimits& limits) : a_(a), skip_(skip), limits_(limits) {}

  Result<void> add_dir(int dirfd, const std::string& prefix, int depth) {
    if (depth > kMaxDepth) return fail(make_error(ErrorCode::kLimitExceeded, "'" + prefix + "' is deeper than " + std::to_string(kMaxDepth) + " levels"));
    auto names = NSBOX_TRY(sorted_names(dirfd, prefix));
    for (size_t i = 0; i < names.size(); ++i) {
      const std::string& name = names[i].first;
      if (i + kPrefetch < names.size()) prefetch(dirfd, names[i + kPrefetch]);
      if (i == 0)
        for (size_t j = 1; j < std::min(kPrefetch, names.size()); ++j) prefetch(dirfd, names[j]);
      std::string rel = prefix.empty() ? name : prefix + "/" + name;
      if (skip_.count(rel)) continue;
      if (rel.size() > kMaxPath) {  // names are archived too: a chain of long ones stays bounded
        leave_out(rel);
        continue;
      }
      struct stat st{};
      if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) continue;  // removed while we walk
        return fail(sys_error("stat " + rel));
      }
      if (S_ISDIR(st.st_mode)) {
        UniqueFd sub(::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!sub) return fail(sys_error("open " + rel));
        if (::fstat(sub.get(), &st) != 0) return fail(sys_error("stat " + rel));
        NSBOX_CHECK(header(rel, AE_IFDIR, st, 0, nullptr));
        NSBOX_CHECK(add_dir(sub.get(), rel, depth + 1));
      } else if (S_ISREG(st.st_mode)) {
        NSBOX_CHECK(add_file(dirfd, name, rel));
      } else if (S_ISLNK(st.st_mode)) {
        char target[4096];
        ssize_t n = ::readlinkat(dirfd, name.c_str(), target, sizeof target - 1);
        if (n < 0) return fail(sys_error("readlink " + rel));
        target[n] = '\0';
        if (link_stays_inside(rel, target)) NSBOX_CHECK(header(rel, AE_IFLNK, st, 0, target));
        else leave_out(rel + " -> " + target);
      } else {
        leave_out(rel);  // FIFOs, sockets, devices: nothing to keep
      }
    }
    return {};
  }

  ArchiveSummary summary() const { return summary_; }

 private:
  static constexpr size_t kNamedLeftOut = 20;

  void leave_out(const std::string& what) {
    if (++summary_.skipped > kNamedLeftOut) return;
    // At most 512 bytes, cut before a UTF-8 continuation byte, not inside a character.
    size_t n = std::min<size_t>(what.size(), 512);
    while (n < what.size() && n > 0 && (static_cast<unsigned char>(what[n]) & 0xC0) == 0x80) --n;
    summary_.left_out.push_back(what.substr(0, n));
  }

  // Cold, a tree of small files is a queue of small reads, one after the other: the next
  // kPrefetch regular files of a directory are asked for ahead (their first 4 MiB), so the
  // disk works while this thread archives. Only what readdir says is a regular file is
  // opened (never a device or FIFO), without following a link.
  static constexpr size_t kPrefetch = 16;
  static void prefetch(int dirfd, const std::pair<std::string, unsigned char>& entry) {
    if (entry.second != DT_REG) return;
    int fd = ::openat(dirfd, entry.first.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOATIME);
    if (fd < 0) fd = ::openat(dirfd, entry.first.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return;
    (void)::posix_fadvise(fd, 0, 4 << 20, POSIX_FADV_WILLNEED);
    ::close(fd);
  }

  // A directory's names (and their types as readdir tells them), sorted; read with the
  // member limit applied as they come, so a directory of millions of (hard-linked, free)
  // entries costs no more than the limit.
  Result<std::vector<std::pair<std::string, unsigned char>>> sorted_names(int dirfd, const std::string& shown) {
    UniqueFd copy(::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!copy) return fail(sys_error("open " + (shown.empty() ? std::string(".") : shown)));
    DIR* d = ::fdopendir(copy.get());
    if (!d) return fail(sys_error("opendir " + shown));
    copy.release();
    std::vector<std::pair<std::string, unsigned char>> names;
    while (dirent* e = ::readdir(d)) {
      std::string_view n = e->d_name;
      if (n == "." || n == "..") continue;
      if (summary_.members + names.size() >= limits_.max_members) {
        ::closedir(d);
        return fail(over_limit("members", limits_.max_members));
      }
      names.emplace_back(std::string(n), e->d_type);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    return names;
  }

  // A member, its data's cost and its size (both 0 but for files).
  Result<void> count(uint64_t bytes, uint64_t apparent) {
    if (++summary_.members > limits_.max_members) return fail(over_limit("members", limits_.max_members));
    summary_.bytes += bytes;
    if (summary_.bytes > limits_.max_bytes) return fail(over_limit("bytes of files", limits_.max_bytes));
    summary_.apparent_bytes += apparent;
    if (summary_.apparent_bytes > limits_.max_apparent_bytes)
      return fail(over_limit("bytes of files counting their holes", limits_.max_apparent_bytes));
    return {};
  }

  Result<void> header(const std::string& rel, unsigned type, const struct stat& st, uint64_t size, const char* link,
                      const FileData* data = nullptr) {
    if (data && data->sparse) {
      BlockCount blocks;
      for (const auto& run : data->extents) blocks.add(run.offset, run.length);
      NSBOX_CHECK(count(blocks.total(), size));
    } else {
      NSBOX_CHECK(count(size, size));
    }
    Entry e(archive_entry_new());
    archive_entry_set_pathname(e.get(), rel.c_str());
    archive_entry_set_filetype(e.get(), type);
    archive_entry_set_perm(e.get(), st.st_mode & 07777 & ~(S_ISUID | S_ISGID));
    archive_entry_set_size(e.get(), static_cast<la_int64_t>(size));
    archive_entry_set_mtime(e.get(), st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    archive_entry_set_uid(e.get(), kSandboxUid);
    archive_entry_set_gid(e.get(), kSandboxUid);
    if (link) archive_entry_set_symlink(e.get(), link);
    if (data && data->sparse) {
      for (const auto& run : data->extents) archive_entry_sparse_add_entry(e.get(), static_cast<la_int64_t>(run.offset), static_cast<la_int64_t>(run.length));
      // A file that is all hole: an empty run at its end still makes it a sparse entry
      // (with no map, libarchive would store its zeros).
      if (data->extents.empty()) archive_entry_sparse_add_entry(e.get(), static_cast<la_int64_t>(size), 0);
    }
    if (archive_write_header(a_, e.get()) != ARCHIVE_OK) return fail(archive_error(a_, "archive " + rel));
    return {};
  }

  Result<void> add_file(int dirfd, const std::string& name, const std::string& rel) {
    // O_NONBLOCK: a FIFO swapped in after the stat must not block the open.
    UniqueFd fd(::openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!fd) return fail(sys_error("open " + rel));
    struct stat st{};
    if (::fstat(fd.get(), &st) != 0) return fail(sys_error("stat " + rel));
    if (!S_ISREG(st.st_mode)) {
      leave_out(rel);
      return {};
    }
    if (st.st_nlink > 1) {
      // Another name of a file already archived is archived as a hard link to it: copies
      // would cost the snapshot and its restore once per name, so that two names of a
      // 600 MiB file made a snapshot no 1 GiB home could take. The first names are kept up
      // to kMaxLinkNames bytes; past that, further files are archived whole, name by name.
      auto [first, fresh] = first_names_.try_emplace({st.st_dev, st.st_ino});
      if (!fresh) return add_link(rel, st, first->second);
      if (link_names_bytes_ + rel.size() <= kMaxLinkNames) {
        first->second = rel;
        link_names_bytes_ += rel.size();
      } else {
        first_names_.erase(first);
      }
    }
    uint64_t size = static_cast<uint64_t>(st.st_size);
    FileData data = NSBOX_TRY(file_data(fd.get(), size, limits_.max_runs, rel));
    NSBOX_CHECK(header(rel, AE_IFREG, st, size, nullptr, &data));
    uint64_t at = 0;
    for (const auto& run : data.extents) {
      NSBOX_CHECK(add_hole(run.offset - at, rel));
      NSBOX_CHECK(add_data(fd.get(), run, rel));
      at = run.end();
    }
    return add_hole(size - at, rel);
  }

  Result<void> add_link(const std::string& rel, const struct stat& st, const std::string& target) {
    NSBOX_CHECK(count(0, 0));
    Entry e(archive_entry_new());
    archive_entry_set_pathname(e.get(), rel.c_str());
    archive_entry_set_filetype(e.get(), AE_IFREG);
    archive_entry_set_perm(e.get(), st.st_mode & 07777 & ~(S_ISUID | S_ISGID));
    archive_entry_set_size(e.get(), 0);
    archive_entry_set_mtime(e.get(), st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    archive_entry_set_uid(e.get(), kSandboxUid);
    archive_entry_set_gid(e.get(), kSandboxUid);
    archive_entry_set_hardlink(e.get(), target.c_str());
    if (archive_write_header(a_, e.get()) != ARCHIVE_OK) return fail(archive_error(a_, "archive " + rel));
    return {};
  }

  Result<void> add_data(int fd, const Extent& run, const std::string& rel) {
    buffer_.resize(kChunk);
    for (uint64_t done = 0; done < run.length;) {
      size_t want = static_cast<size_t>(std::min<uint64_t>(kChunk, run.length - done));
      ssize_t got = ::pread(fd, buffer_.data(), want, static_cast<off_t>(run.offset + done));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) return fail(sys_error("read " + rel));
      if (got == 0) {
        // It shrank while we read (a live sandbox): the header promised the run; pad
        // with zeros, as tar does.
        std::fill(buffer_.begin(), buffer_.begin() + static_cast<long>(want), '\0');
        got = static_cast<ssize_t>(want);
      }
      if (archive_write_data(a_, buffer_.data(), static_cast<size_t>(got)) < 0) return fail(archive_error(a_, "archive " + rel));
      done += static_cast<uint64_t>(got);
    }
    return {};
  }

  Result<void> add_hole(uint64_t length, const std::string& rel) {
    if (length == 0) return {};
    const void* zeros = NSBOX_TRY(zeros_.get());
    while (length > 0) {
      la_ssize_t took = archive_write_data(a_, zeros, static_cast<size_t>(std::min<uint64_t>(length, Zeros::kSize)));
      if (took <= 0) return fail(archive_error(a_, "archive " + rel));
      length -= static_cast<uint64_t>(took);
    }
    return {};
  }

  archive* a_;
  const std::set<std::string>& skip_;
  ArchiveLimits limits_;
  ArchiveSummary summary_;
  std::vector<char> buffer_;
  Zeros zeros_;
  static constexpr size_t kMaxLinkNames = 16 << 20;
  std::map<std::pair<dev_t, ino_t>, std::string> first_names_;  // of files of several names
  size_t link_names_bytes_ = 0;
};

}  // namespace

Result<std::string> clean_member_name(const std::string& name) {
  if (name.empty()) return fail(refused(name, "an empty name"));
  if (name.front() == '/') return fail(refused(name, "an absolute path"));
  auto clean = files::clean_lexically(name);
  if (!clean) return fail(refused(name, "'..' in the path"));
  if (clean->empty()) return fail(refused(name, "no name left"));
  return *clean;
}

bool link_stays_inside(const std::string& member, const std::string& target) {
  if (target.empty() || target.front() == '/') return false;
  // The link's directory, as a stack of components, then the target's applied to it.
  std::vector<std::string_view> stack;
  std::string_view rest(member);
  for (size_t slash; (slash = rest.find('/')) != std::string_view::npos; rest.remove_prefix(slash + 1))
    stack.push_back(rest.substr(0, slash));
  std::string_view t(target);
  while (!t.empty()) {
    size_t slash = t.find('/');
    std::string_view part = t.substr(0, slash);
    t.remove_prefix(slash == std::string_view::npos ? t.size() : slash + 1);
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (stack.empty()) return false;
      stack.pop_back();
    } else {
      stack.push_back(part);
    }
  }
  return true;
}

Result<ArchiveSummary> pack(int root_fd, int out_fd, const std::set<std::string>& skip, const ArchiveLimits& limits) {
  // The sink outlives the writer: freeing a writer closes it, which may still write.
  Sink sink{out_fd, {}, {}};
  Writer a(archive_write_new());
  if (!a) return fail(make_error(ErrorCode::kSystem, "archive_write_new failed"));
  if (archive_write_set_format_pax_restricted(a.get()) != ARCHIVE_OK) return fail(archive_error(a.get(), "pax format"));
  archive_write_set_bytes_per_block(a.get(), static_cast<int>(kChunk));  // 1 MiB writes, not 10 KiB ones
  archive_write_set_bytes_in_last_block(a.get(), 1);  // no padding past the end-of-archive blocks
  if (archive_write_open2(a.get(), &sink, nullptr, write_to_sink, nullptr, nullptr) != ARCHIVE_OK)
    return fail(archive_error(a.get(), "open the archive"));
  Packer packer(a.get(), skip, limits);
  auto packed = packer.add_dir(root_fd, "", 0);
  if (!packed) {
    // Nothing more is written (the caller removes the file), but the writer is closed:
    // libarchive frees its block buffer only then (archive_write_fail would leak it).
    sink.discard = true;
    (void)archive_write_close(a.get());
    if (!sink.error.empty()) return fail(make_error(ErrorCode::kSystem, "write the snapshot: " + sink.error));
    return fail(std::move(packed.error()));
  }
  if (archive_write_close(a.get()) != ARCHIVE_OK) {
    if (!sink.error.empty()) return fail(make_error(ErrorCode::kSystem, "write the snapshot: " + sink.error));
    return fail(archive_error(a.get(), "finish the archive"));
  }
  ArchiveSummary s = packer.summary();
  s.sha256 = sink.hash.hex_digest();
  return s;
}

namespace {

// One pass over the archive: every member checked; with `out`, extracted too.
Result<ArchiveSummary> read_members(int archive_fd, const ArchiveLimits& limits, const ArchiveSource& source, archive* out) {
  Reader in(archive_read_new());
  if (!in) return fail(make_error(ErrorCode::kSystem, "archive_read_new failed"));
  // One format, no filter: tar (and pax), or zip read through its central directory.
  if (source.zip) archive_read_support_format_zip_seekable(in.get());
  else archive_read_support_format_tar(in.get());
  if (archive_read_open_fd(in.get(), archive_fd, kChunk) != ARCHIVE_OK) {
    Error e = archive_error(in.get(), "open " + source.noun);
    // Bytes that are no archive of the format asked for: the caller's, as a refused member is.
    if (archive_errno(in.get()) == EILSEQ) e.code = ErrorCode::kInvalidArgument;  // libarchive's "file format" errno
    return fail(std::move(e));
  }
  ArchiveSummary summary;
  // Names' hashes: memory bounded by the member limit alone. (A crafted collision can at
  // worst have a hard link name a directory or a symlink of the archive's own: link(2)
  // refuses the one and links the other itself, never what it points to.)
  std::unordered_set<size_t> seen, files_made;
  for (;;) {
    archive_entry* e = nullptr;
    int r = archive_read_next_header(in.get(), &e);
    if (r == ARCHIVE_EOF) break;
    if (r != ARCHIVE_OK) return fail(archive_error(in.get(), "read " + source.noun));
    const char* raw = archive_entry_pathname(e);
    std::string name = NSBOX_TRY(clean_member_name(raw ? raw : ""));
    if (!seen.insert(std::hash<std::string>{}(name)).second) return fail(refused(name, "a duplicate"));
    if (++summary.members > limits.max_members)
      return fail(make_error(ErrorCode::kLimitExceeded, source.noun + " has more than " + std::to_string(limits.max_members) + " members",
                             source.raise_members));
    if (const char* link = archive_entry_hardlink(e)) {
      if (!source.hard_links) return fail(refused(name, "a hard link"));
      // Only another name for a file this archive already made, carrying no data of its
      // own (which would rewrite that file): all a hard link made inside a workspace needs.
      // libarchive's disk writer refuses a target through a symlink or with `..`.
      auto target = clean_member_name(link);
      if (!target || !files_made.count(std::hash<std::string>{}(*target)))
        return fail(refused(name, "a hard link to what is not a file before it ('" + std::string(link).substr(0, 256) + "')"));
      if (archive_entry_size(e) > 0) return fail(refused(name, "a hard link carrying data"));
      if (!out) continue;
      archive_entry_set_pathname(e, name.c_str());
      archive_entry_set_hardlink(e, target->c_str());
      if (archive_write_header(out, e) != ARCHIVE_OK || archive_write_finish_entry(out) != ARCHIVE_OK)
        return fail(archive_error(out, "restore " + name));
      continue;
    }
    unsigned type = archive_entry_filetype(e);
    if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK)
      return fail(refused(name, type == AE_IFCHR || type == AE_IFBLK ? "a device node" : type == AE_IFIFO ? "a FIFO" : "not a file, directory or symlink"));
    if (type == AE_IFLNK) {
      const char* target = archive_entry_symlink(e);
      if (!target || !link_stays_inside(name, target))
        return fail(refused(name, std::string("a symlink pointing out (to '") + (target ? target : "") + "')"));
    }
    if (type == AE_IFREG) files_made.insert(std::hash<std::string>{}(name));
    la_int64_t size = type == AE_IFREG ? archive_entry_size(e) : 0;
    if (size < 0) return fail(refused(name, "a negative size"));
    summary.apparent_bytes += static_cast<uint64_t>(size);
    if (summary.apparent_bytes > limits.max_apparent_bytes)
      return fail(make_error(ErrorCode::kLimitExceeded, source.noun + " holds more than " + std::to_string(limits.max_apparent_bytes) +
                                                            " bytes of files counting their holes"));
    auto over_bytes = [&] {
      return make_error(ErrorCode::kLimitExceeded, source.noun + " holds more than " + std::to_string(limits.max_bytes) + " bytes of files",
                        source.raise_bytes);
    };
    // A sparse entry's cost is known from its data's runs (BlockCount), which are read even
    // when only checking; a dense one costs its size.
    const int runs = type == AE_IFREG ? archive_entry_sparse_count(e) : 0;
    const bool sparse = runs > 0;
    if (static_cast<uint64_t>(runs) > limits.max_runs)
      return fail(make_error(ErrorCode::kLimitExceeded, "'" + name.substr(0, 256) + "' in " + source.noun + " has more than " +
                                                            std::to_string(limits.max_runs) + " runs of data between holes"));
    if (!sparse) {
      summary.bytes += static_cast<uint64_t>(size);
      if (summary.bytes > limits.max_bytes) return fail(over_bytes());
    }
    if (!out && !sparse) continue;  // the data is skipped
    if (out) {
      archive_entry_set_pathname(e, name.c_str());
      archive_entry_set_perm(e, archive_entry_perm(e) & 07777 & ~(S_ISUID | S_ISGID));
      if (archive_write_header(out, e) != ARCHIVE_OK) return fail(archive_error(out, "restore " + name));
    }
    if (type == AE_IFREG) {
      // The reader hands over blocks where the map puts them, and a map (or a zip's size)
      // may say anything: blocks must come in order, apart, and within the size, sparse or
      // not, so that what is written is what was counted. (Past the size, libarchive's
      // disk writer, 3.6.2, computes a negative length, which Linux refuses.)
      BlockCount blocks;
      const uint64_t before = summary.bytes;
      uint64_t end = 0;
      const void* block = nullptr;
      size_t len = 0;
      la_int64_t offset = 0;
      for (;;) {
        int got = archive_read_data_block(in.get(), &block, &len, &offset);
        if (got == ARCHIVE_EOF) break;
        if (got != ARCHIVE_OK) return fail(archive_error(in.get(), "read " + name));
        const uint64_t at = static_cast<uint64_t>(offset), limit = static_cast<uint64_t>(size);
        if (offset < 0 || at < end || at > limit || len > limit - at)
          return fail(refused(name, "data out of order or past its size (a lying size or sparse map)"));
        end = at + len;
        if (sparse) {
          blocks.add(at, len);
          summary.bytes = before + blocks.total();
          if (summary.bytes > limits.max_bytes) return fail(over_bytes());
        }
        if (out && archive_write_data_block(out, block, len, offset) != ARCHIVE_OK) return fail(archive_error(out, "restore " + name));
      }
    }
    if (!out) continue;
    if (archive_write_finish_entry(out) != ARCHIVE_OK) return fail(archive_error(out, "restore " + name));
  }
  return summary;
}

}  // namespace

Result<ArchiveSummary> check(int archive_fd, const ArchiveLimits& limits, const ArchiveSource& source) {
  auto summary = NSBOX_TRY(read_members(archive_fd, limits, source, nullptr));
  if (::lseek(archive_fd, 0, SEEK_SET) != 0) return fail(sys_error("rewind " + source.noun));
  return summary;
}

Result<ArchiveSummary> unpack(int archive_fd, const ArchiveLimits& limits, const ArchiveSource& source) {
  Writer out(archive_write_disk_new());
  constexpr int kFlags = ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                         ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS | ARCHIVE_EXTRACT_NO_OVERWRITE;
  archive_write_disk_set_options(out.get(), kFlags);
  auto summary = NSBOX_TRY(read_members(archive_fd, limits, source, out.get()));
  // Directories' modes and times are set last (a read-only directory filled first).
  if (archive_write_close(out.get()) != ARCHIVE_OK) return fail(archive_error(out.get(), "finish the restore"));
  return summary;
}

}  // namespace nsbox::snapshot
