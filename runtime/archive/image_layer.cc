#include "runtime/archive/image_layer.h"

#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>

#include <cstring>
#include <memory>
#include <unordered_set>
#include <vector>

#include "isolation/sys/sha256.h"
#include "runtime/archive/libarchive_handles.h"

namespace nsbox::image_layer {
namespace {

constexpr size_t kChunk = 1 << 20;
constexpr size_t kMaxLeftOut = 16;  // names of what was left out, in the summary

using archive_handles::Reader;
using archive_handles::Writer;

Error layer_error(archive* a, const std::string& what) {
  const char* text = archive_error_string(a);
  std::string message = what + ": " + (text ? text : "libarchive failed");
  int err = archive_errno(a);
  if (err > 0 && err != EILSEQ && err != EINVAL) message += std::string(": ") + std::strerror(err);
  return make_error(err == EILSEQ ? ErrorCode::kInvalidArgument : ErrorCode::kSystem, message);
}

Error refused(const std::string& member, const std::string& why) {
  return make_error(ErrorCode::kInvalidArgument, "layer member '" + member.substr(0, 256) + "' refused: " + why);
}

// The decompressed stream: the outer reader (a raw format under any of the filters) hands
// its bytes to the tar reader, through the hash, up to a bound.
struct Stream {
  archive* outer = nullptr;
  Sha256 hash;
  std::vector<char> buf = std::vector<char>(kChunk);
  uint64_t total = 0;
  uint64_t limit = 0;
  std::string error;
};

la_ssize_t next_block(archive*, void* data, const void** block) {
  auto* s = static_cast<Stream*>(data);
  la_ssize_t n = archive_read_data(s->outer, s->buf.data(), s->buf.size());
  if (n < 0) {
    s->error = layer_error(s->outer, "decompress the layer").message;
    return ARCHIVE_FATAL;
  }
  s->total += static_cast<uint64_t>(n);
  if (s->total > s->limit) {
    s->error = "the layer decompresses to more than " + std::to_string(s->limit) + " bytes";
    return ARCHIVE_FATAL;
  }
  s->hash.update(std::string_view(s->buf.data(), static_cast<size_t>(n)));
  *block = s->buf.data();
  return n;
}

// What the tar reader did not read (its end-of-archive blocks, padding) still counts.
Result<void> drain(Stream& s) {
  const void* block = nullptr;
  for (;;) {
    la_ssize_t n = next_block(nullptr, &s, &block);
    if (n < 0) return fail(make_error(ErrorCode::kInvalidArgument, s.error));
    if (n == 0) return {};
  }
}

Result<void> write_data(archive* in, archive* out, const std::string& name, la_int64_t size) {
  const void* block = nullptr;
  size_t len = 0;
  la_int64_t offset = 0;
  uint64_t end = 0;
  for (;;) {
    int got = archive_read_data_block(in, &block, &len, &offset);
    if (got == ARCHIVE_EOF) return {};
    if (got != ARCHIVE_OK) return fail(layer_error(in, "read " + name));
    const uint64_t at = static_cast<uint64_t>(offset), limit = static_cast<uint64_t>(size);
    if (offset < 0 || at < end || at > limit || len > limit - at)
      return fail(refused(name, "data out of order or past its size (a lying size or sparse map)"));
    end = at + len;
    if (out && archive_write_data_block(out, block, len, offset) != ARCHIVE_OK) return fail(layer_error(out, "unpack " + name));
  }
}

}  // namespace

Result<snapshot::ArchiveSummary> read(int blob_fd, const LayerLimits& limits, bool extract) {
  Stream stream;
  // Headers, names and padding cost a member at most a few KiB beyond its data.
  stream.limit = limits.max_bytes + limits.max_members * 4096;
  Reader outer(archive_read_new());
  if (!outer) return fail(make_error(ErrorCode::kSystem, "archive_read_new failed"));
  archive_read_support_filter_gzip(outer.get());
  archive_read_support_filter_zstd(outer.get());
  archive_read_support_format_raw(outer.get());
  if (archive_read_open_fd(outer.get(), blob_fd, kChunk) != ARCHIVE_OK) return fail(layer_error(outer.get(), "open the layer"));
  archive_entry* raw = nullptr;
  if (archive_read_next_header(outer.get(), &raw) != ARCHIVE_OK) return fail(layer_error(outer.get(), "open the layer"));
  stream.outer = outer.get();

  snapshot::ArchiveSummary summary;
  if (!extract) {
    NSBOX_CHECK(drain(stream));
    summary.sha256 = stream.hash.hex_digest();
    return summary;
  }
  Reader tar(archive_read_new());
  if (!tar) return fail(make_error(ErrorCode::kSystem, "archive_read_new failed"));
  archive_read_support_format_tar(tar.get());
  if (archive_read_open(tar.get(), &stream, nullptr, next_block, nullptr) != ARCHIVE_OK)
    return fail(stream.error.empty() ? layer_error(tar.get(), "read the layer") : make_error(ErrorCode::kInvalidArgument, stream.error));
  Writer out(archive_write_disk_new());
  archive_write_disk_set_options(out.get(), ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                                                ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS |
                                                ARCHIVE_EXTRACT_NO_OVERWRITE);
  std::unordered_set<std::string> seen, files_made;
  for (;;) {
    archive_entry* e = nullptr;
    int r = archive_read_next_header(tar.get(), &e);
    if (r == ARCHIVE_EOF) break;
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
      return fail(stream.error.empty() ? layer_error(tar.get(), "read the layer") : make_error(ErrorCode::kInvalidArgument, stream.error));
    const char* raw_name = archive_entry_pathname(e);
    auto cleaned = snapshot::clean_member_name(raw_name ? raw_name : "");
    if (!cleaned) {
      if (raw_name && (std::string(raw_name) == "./" || std::string(raw_name) == ".")) continue;  // the root itself
      return fail(refused(raw_name ? raw_name : "", cleaned.error().message));
    }
    const std::string& name = *cleaned;
    if (++summary.members > limits.max_members)
      return fail(make_error(ErrorCode::kLimitExceeded, "the layer has more than " + std::to_string(limits.max_members) + " members"));
    unsigned type = archive_entry_filetype(e);
    const char* link = archive_entry_hardlink(e);
    bool duplicate = !seen.insert(name).second;
    if (duplicate && (link || type != AE_IFDIR)) return fail(refused(name, "a name twice"));
    if (duplicate) continue;  // a directory again: the first one's metadata stays
    if (link) {
      auto target = snapshot::clean_member_name(link);
      if (!target || !files_made.count(*target))
        return fail(refused(name, "a hard link to what is not a file before it ('" + std::string(link).substr(0, 256) + "')"));
      archive_entry_set_pathname(e, name.c_str());
      archive_entry_set_hardlink(e, target->c_str());
      archive_entry_set_size(e, 0);
      if (archive_write_header(out.get(), e) != ARCHIVE_OK || archive_write_finish_entry(out.get()) != ARCHIVE_OK)
        return fail(layer_error(out.get(), "unpack " + name));
      continue;
    }
    if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
      if (++summary.skipped <= kMaxLeftOut) summary.left_out.push_back(name);
      continue;
    }
    la_int64_t size = type == AE_IFREG ? archive_entry_size(e) : 0;
    if (size < 0) return fail(refused(name, "a negative size"));
    summary.bytes += static_cast<uint64_t>(size);
    if (summary.bytes > limits.max_bytes)
      return fail(make_error(ErrorCode::kLimitExceeded, "the layer holds more than " + std::to_string(limits.max_bytes) + " bytes of files"));
    if (type == AE_IFREG) files_made.insert(name);
    archive_entry_set_pathname(e, name.c_str());
    // Directories keep u+rwx: the merge, as their owner, must read and fill them.
    mode_t perm = archive_entry_perm(e) & 07777 & ~(S_ISUID | S_ISGID);
    archive_entry_set_perm(e, type == AE_IFDIR ? (perm | 0700) : perm);
    // No extended attribute, ACL or file flag is restored: a file capability least of all.
    archive_entry_xattr_clear(e);
    archive_entry_acl_clear(e);
    archive_entry_set_fflags(e, 0, 0);
    if (archive_write_header(out.get(), e) != ARCHIVE_OK) return fail(layer_error(out.get(), "unpack " + name));
    if (type == AE_IFREG) NSBOX_CHECK(write_data(tar.get(), out.get(), name, size));
    if (archive_write_finish_entry(out.get()) != ARCHIVE_OK) return fail(layer_error(out.get(), "unpack " + name));
  }
  // Directories' modes and times are set last (a read-only directory filled first).
  if (archive_write_close(out.get()) != ARCHIVE_OK) return fail(layer_error(out.get(), "finish the layer"));
  NSBOX_CHECK(drain(stream));
  summary.sha256 = stream.hash.hex_digest();
  return summary;
}

}  // namespace nsbox::image_layer
