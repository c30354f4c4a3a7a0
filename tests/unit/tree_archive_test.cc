// Snapshot archives (runtime/archive/tree_archive.h): members' names and symlink targets,
// checked before anything is unpacked, and sparse files, kept sparse and counted as a disk
// would count them.
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "isolation/sys/files.h"
#include "isolation/sys/unique_fd.h"
#include "runtime/archive/tree_archive.h"
#include "tests/support/temp_dir.h"

using namespace nsbox::snapshot;
using namespace std::string_literals;
using nsbox::Result;

TEST_CASE("member names are made relative and clean, and absolute, '..' and empty names are refused") {
  CHECK(*clean_member_name("a/b") == "a/b");
  CHECK(*clean_member_name("./a//b/") == "a/b");
  CHECK(*clean_member_name("a/./b") == "a/b");
  for (const char* bad : {"", "/", "/etc/passwd", "..", "../x", "a/../../x", "a/..", ".", "./", "//x"}) {
    INFO(bad);
    auto r = clean_member_name(bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().message.find("refused") != std::string::npos);
  }
  CHECK(clean_member_name("../x").error().message.find("'..' in the path") != std::string::npos);
  CHECK(clean_member_name("/x").error().message.find("an absolute path") != std::string::npos);
}

TEST_CASE("a symlink stays inside when its relative target never climbs above the root") {
  CHECK(link_stays_inside("link", "proj/a.py"));
  CHECK(link_stays_inside("a/b/link", "../c"));
  CHECK(link_stays_inside("a/b/link", "../../c"));
  CHECK(link_stays_inside("a/link", "./x/../y"));
  CHECK_FALSE(link_stays_inside("link", "../x"));
  CHECK_FALSE(link_stays_inside("a/link", "../../x"));
  CHECK_FALSE(link_stays_inside("a/link", "x/../../../y"));
  CHECK_FALSE(link_stays_inside("link", "/etc/passwd"));
  CHECK_FALSE(link_stays_inside("link", ""));
}

namespace {

using nsbox::test::TempDir;

struct Run {
  uint64_t offset;
  std::string bytes;
};

// A file of `size` bytes holding `runs` where they say, holes elsewhere.
void make_sparse(const std::string& path, uint64_t size, const std::vector<Run>& runs) {
  nsbox::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  REQUIRE(fd);
  REQUIRE(::ftruncate(fd.get(), static_cast<off_t>(size)) == 0);
  for (const auto& r : runs) REQUIRE(::pwrite(fd.get(), r.bytes.data(), r.bytes.size(), static_cast<off_t>(r.offset)) == static_cast<ssize_t>(r.bytes.size()));
}

uint64_t allocated(const std::string& path) {
  struct stat st{};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

uint64_t apparent(const std::string& path) {
  struct stat st{};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return static_cast<uint64_t>(st.st_size);
}

std::string read_at(const std::string& path, uint64_t offset, size_t n) {
  nsbox::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  REQUIRE(fd);
  std::string out(n, '\0');
  REQUIRE(::pread(fd.get(), out.data(), n, static_cast<off_t>(offset)) == static_cast<ssize_t>(n));
  return out;
}

nsbox::UniqueFd memfd() {
  nsbox::UniqueFd fd(::memfd_create("archive", MFD_CLOEXEC));
  REQUIRE(fd);
  return fd;
}

nsbox::UniqueFd memfd_of(const std::string& bytes) {
  auto fd = memfd();
  REQUIRE(::write(fd.get(), bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  REQUIRE(::lseek(fd.get(), 0, SEEK_SET) == 0);
  return fd;
}

std::string contents(int fd) {
  struct stat st{};
  REQUIRE(::fstat(fd, &st) == 0);
  std::string out(static_cast<size_t>(st.st_size), '\0');
  REQUIRE(::pread(fd, out.data(), out.size(), 0) == static_cast<ssize_t>(out.size()));
  return out;
}

Result<ArchiveSummary> pack_dir(const std::string& dir, int out, const ArchiveLimits& limits = {}) {
  nsbox::UniqueFd root(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  REQUIRE(root);
  return pack(root.get(), out, {}, limits);
}

// unpack() writes into the current directory: `dir`, for the call.
Result<ArchiveSummary> unpack_into(const std::string& dir, int archive, const ArchiveLimits& limits = {}) {
  nsbox::UniqueFd back(::open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  REQUIRE(::chdir(dir.c_str()) == 0);
  auto r = unpack(archive, limits);
  REQUIRE(::fchdir(back.get()) == 0);
  return r;
}

// A pax archive of one sparse file written by libarchive itself, as another tool would:
// `runs` of data (each byte 'x'), holes elsewhere.
std::string sparse_archive(const std::string& name, uint64_t size, const std::vector<std::pair<uint64_t, uint64_t>>& runs) {
  auto fd = memfd();
  archive* a = archive_write_new();
  REQUIRE(archive_write_set_format_pax_restricted(a) == ARCHIVE_OK);
  REQUIRE(archive_write_open_fd(a, fd.get()) == ARCHIVE_OK);
  archive_entry* e = archive_entry_new();
  archive_entry_set_pathname(e, name.c_str());
  archive_entry_set_filetype(e, AE_IFREG);
  archive_entry_set_perm(e, 0644);
  archive_entry_set_size(e, static_cast<la_int64_t>(size));
  for (auto [offset, length] : runs) archive_entry_sparse_add_entry(e, static_cast<la_int64_t>(offset), static_cast<la_int64_t>(length));
  REQUIRE(archive_write_header(a, e) == ARCHIVE_OK);
  uint64_t at = 0;
  for (auto [offset, length] : runs) {
    std::string hole(offset - at, '\0'), data(length, 'x');
    if (!hole.empty()) REQUIRE(archive_write_data(a, hole.data(), hole.size()) == static_cast<la_ssize_t>(hole.size()));
    REQUIRE(archive_write_data(a, data.data(), data.size()) == static_cast<la_ssize_t>(data.size()));
    at = offset + length;
  }
  std::string tail(size - at, '\0');
  if (!tail.empty()) REQUIRE(archive_write_data(a, tail.data(), tail.size()) == static_cast<la_ssize_t>(tail.size()));
  archive_entry_free(e);
  REQUIRE(archive_write_close(a) == ARCHIVE_OK);
  archive_write_free(a);
  return contents(fd.get());
}

// `bytes` with `from` replaced by `to`, which has the same length.
std::string patched(std::string bytes, const std::string& from, const std::string& to) {
  REQUIRE(from.size() == to.size());
  auto at = bytes.find(from);
  REQUIRE(at != std::string::npos);
  bytes.replace(at, from.size(), to);
  return bytes;
}

}  // namespace

TEST_CASE("a sparse file is archived as its data, costs the blocks it uses, and is restored with its holes") {
  TempDir from("nsbox-sparse-from"), to("nsbox-sparse-to");
  const uint64_t kSize = 64ull << 20;
  make_sparse(from.path() + "/sparse", kSize, {{0, "head"}, {32ull << 20, "middle"}, {kSize - 3, "end"}});
  make_sparse(from.path() + "/holes-only", kSize, {});
  make_sparse(from.path() + "/dense", 10000, {{0, std::string(10000, 'd')}});
  REQUIRE(allocated(from.path() + "/sparse") < (1u << 20));

  auto archive = memfd();
  auto packed = pack_dir(from.path(), archive.get());
  REQUIRE(packed);
  struct stat st{};
  REQUIRE(::fstat(archive.get(), &st) == 0);
  CHECK(st.st_size < 64 * 1024);  // not the 128 MiB of zeros
  // The sparse file costs the blocks its runs take on the disk, the file of holes none,
  // the dense one its size.
  CHECK(packed->bytes == allocated(from.path() + "/sparse") + 10000);
  CHECK(packed->apparent_bytes == 2 * kSize + 10000);

  REQUIRE(::lseek(archive.get(), 0, SEEK_SET) == 0);
  auto checked = check(archive.get(), {});
  REQUIRE(checked);
  CHECK(checked->bytes == packed->bytes);
  auto restored = unpack_into(to.path(), archive.get());
  REQUIRE(restored);
  for (const char* name : {"/sparse", "/holes-only"}) {
    INFO(name);
    CHECK(apparent(to.path() + name) == kSize);
    CHECK(allocated(to.path() + name) < (1u << 20));
  }
  CHECK(read_at(to.path() + "/sparse", 0, 4) == "head");
  CHECK(read_at(to.path() + "/sparse", 32ull << 20, 6) == "middle");
  CHECK(read_at(to.path() + "/sparse", kSize - 3, 3) == "end");
  CHECK(read_at(to.path() + "/sparse", 1 << 20, 4) == std::string(4, '\0'));
  CHECK(read_at(to.path() + "/dense", 0, 10000) == std::string(10000, 'd'));

  // The restored tree packs into the same archive: the same fingerprint.
  auto again = memfd();
  auto repacked = pack_dir(to.path(), again.get());
  REQUIRE(repacked);
  CHECK(repacked->sha256 == packed->sha256);
}

TEST_CASE("a sparse map made elsewhere costs the blocks its runs touch, and one whose data overlaps or lies past the file's end is refused") {
  // 100 runs of one byte, 8 KiB apart: 100 bytes of data, 100 blocks of a disk.
  std::vector<std::pair<uint64_t, uint64_t>> runs;
  for (uint64_t i = 0; i < 100; ++i) runs.emplace_back(i * 8192, 1);
  auto spread = memfd_of(sparse_archive("spread", 1 << 20, runs));
  auto checked = check(spread.get(), {});
  REQUIRE(checked);
  CHECK(checked->bytes == 100 * 1024);
  ArchiveLimits tight;
  tight.max_bytes = 50 * 1024;
  auto refused = check(spread.get(), tight);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message.find("more than 51200 bytes of files") != std::string::npos);

  // libarchive writes the map as text ahead of the data: "<runs>\n" then "<offset>\n<length>\n"
  // per run, and an empty run at the end; the tests edit it in place.
  const std::string good = sparse_archive("f", 100, {{10, 5}, {20, 5}});
  REQUIRE(good.find("3\n10\n5\n20\n5\n100\n0\n\0"s) != std::string::npos);
  struct Case {
    const char* what;
    std::string bytes;
  };
  const Case cases[] = {
      {"past the end", patched(good, "3\n10\n5\n20\n5\n100\n0\n\0"s, "3\n10\n5\n150\n5\n100\n0\n"s)},
      {"straddling the end", patched(good, "3\n10\n5\n20\n5\n", "3\n10\n5\n98\n5\n")},
      {"overlapping", patched(good, "3\n10\n5\n20\n5\n", "3\n10\n5\n12\n5\n")},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    auto fd = memfd_of(c.bytes);
    auto r = check(fd.get(), {});
    REQUIRE_FALSE(r);
    CHECK(r.error().message.find("'f' refused: data out of order or past its size") != std::string::npos);
    // Unpacking checks as it goes, before each block is written.
    TempDir to("nsbox-sparse-to");
    REQUIRE_FALSE(unpack_into(to.path(), fd.get()));
    if (nsbox::files::exists(to.path() + "/f")) CHECK(apparent(to.path() + "/f") <= 100);
  }
}

TEST_CASE("a file of more runs than the limit, or files larger than the limit counting holes, are refused packing and checking") {
  TempDir from("nsbox-sparse-from");
  std::vector<Run> runs;
  for (uint64_t i = 0; i < 9; ++i) runs.push_back({i * 65536, "x"});
  make_sparse(from.path() + "/runs", 9 * 65536, runs);
  ArchiveLimits eight;
  eight.max_runs = 8;
  auto archive = memfd();
  auto packed = pack_dir(from.path(), archive.get(), eight);
  REQUIRE_FALSE(packed);
  CHECK(packed.error().message.find("'runs' has more than 8 runs of data between holes") != std::string::npos);
  auto made = memfd();
  REQUIRE(pack_dir(from.path(), made.get()));
  REQUIRE(::lseek(made.get(), 0, SEEK_SET) == 0);
  auto checked = check(made.get(), eight);
  REQUIRE_FALSE(checked);
  CHECK(checked.error().message.find("more than 8 runs") != std::string::npos);

  ArchiveLimits small;
  small.max_apparent_bytes = 512 << 10;
  auto over = memfd();
  auto refused = pack_dir(from.path(), over.get(), small);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message.find("more than 524288 bytes of files counting their holes") != std::string::npos);
  REQUIRE(::lseek(made.get(), 0, SEEK_SET) == 0);
  auto unchecked = check(made.get(), small);
  REQUIRE_FALSE(unchecked);
  CHECK(unchecked.error().message.find("counting their holes") != std::string::npos);
}

namespace {

// A pax archive written by libarchive of `members`: (name, hard link target or "" for a
// file of one byte, or "/" for a directory).
std::string archive_of(const std::vector<std::pair<std::string, std::string>>& members) {
  auto fd = memfd();
  archive* a = archive_write_new();
  REQUIRE(archive_write_set_format_pax_restricted(a) == ARCHIVE_OK);
  REQUIRE(archive_write_open_fd(a, fd.get()) == ARCHIVE_OK);
  for (const auto& [name, link] : members) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, name.c_str());
    archive_entry_set_filetype(e, link == "/" ? AE_IFDIR : AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, link.empty() ? 1 : 0);
    if (!link.empty() && link != "/") archive_entry_set_hardlink(e, link.c_str());
    REQUIRE(archive_write_header(a, e) == ARCHIVE_OK);
    if (link.empty()) REQUIRE(archive_write_data(a, "x", 1) == 1);
    archive_entry_free(e);
  }
  REQUIRE(archive_write_close(a) == ARCHIVE_OK);
  archive_write_free(a);
  return contents(fd.get());
}

ino_t inode(const std::string& path) {
  struct stat st{};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_ino;
}

}  // namespace

TEST_CASE("a file of several names is archived once and its other names as hard links to it, and other hard links are refused") {
  TempDir from("nsbox-links-from"), to("nsbox-links-to");
  REQUIRE(::mkdir((from.path() + "/sub").c_str(), 0755) == 0);
  make_sparse(from.path() + "/a", 100000, {{0, std::string(100000, 'a')}});
  REQUIRE(::link((from.path() + "/a").c_str(), (from.path() + "/sub/b").c_str()) == 0);
  REQUIRE(::link((from.path() + "/a").c_str(), (from.path() + "/c").c_str()) == 0);
  auto archive = memfd();
  auto packed = pack_dir(from.path(), archive.get());
  REQUIRE(packed);
  CHECK(packed->bytes == 100000);  // once, not three times
  CHECK(packed->members == 4);
  struct stat st{};
  REQUIRE(::fstat(archive.get(), &st) == 0);
  CHECK(st.st_size < 200000);
  REQUIRE(::lseek(archive.get(), 0, SEEK_SET) == 0);
  auto checked = check(archive.get(), {});
  REQUIRE(checked);
  CHECK(checked->bytes == 100000);
  REQUIRE(unpack_into(to.path(), archive.get()));
  CHECK(inode(to.path() + "/sub/b") == inode(to.path() + "/a"));
  CHECK(inode(to.path() + "/c") == inode(to.path() + "/a"));
  CHECK(read_at(to.path() + "/c", 99990, 10) == std::string(10, 'a'));

  struct Case {
    const char* what;
    std::vector<std::pair<std::string, std::string>> members;
  };
  const Case cases[] = {
      {"to a file after it", {{"b", "a"}, {"a", ""}}},
      {"to no member", {{"a", ""}, {"b", "elsewhere"}}},
      {"to a directory", {{"d", "/"}, {"b", "d"}}},
      {"to a hard link", {{"a", ""}, {"b", "a"}, {"c", "b"}}},
      {"out of the root", {{"a", ""}, {"b", "../a"}}},
      {"absolute", {{"a", ""}, {"b", "/etc/passwd"}}},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    auto fd = memfd_of(archive_of(c.members));
    auto r = check(fd.get(), {});
    REQUIRE_FALSE(r);
    CHECK(r.error().message.find("refused: a hard link to what is not a file before it") != std::string::npos);
  }
}

TEST_CASE("an archive a caller hands to fs:extract has no hard link, even to a file before it") {
  auto fd = memfd_of(archive_of({{"a", ""}, {"b", "a"}}));
  ArchiveSource extract;
  extract.noun = "the archive";
  extract.hard_links = false;
  auto r = check(fd.get(), {}, extract);
  REQUIRE_FALSE(r);
  CHECK(r.error().message.find("'b' refused: a hard link") != std::string::npos);
  REQUIRE(::lseek(fd.get(), 0, SEEK_SET) == 0);
  CHECK(check(fd.get(), {}));  // as a snapshot's
}
