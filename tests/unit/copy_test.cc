// The two kernel-side copies: files::copy_stream (downloads) and hashed_copy (uploads),
// through their ways: splice from a file and from a pipe, and the read/write fallback
// for an end splice refuses (Linux 6.x splices into a terminal but not out of one).
#include <fcntl.h>
#include <pty.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <thread>

#include "isolation/sys/files.h"
#include "isolation/sys/sha256.h"
#include "mounts/hashed_copy.h"

using namespace nsbox;

namespace {

std::string pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 2654435761u) >> 13);
  return s;
}

UniqueFd memfd_with(const std::string& data) {
  UniqueFd fd(::memfd_create("nsbox-copy-test", MFD_CLOEXEC));
  REQUIRE(fd);
  REQUIRE(files::write_all(fd.get(), data, "memfd"));
  REQUIRE(::lseek(fd.get(), 0, SEEK_SET) == 0);
  return fd;
}

std::string contents(int fd) {
  std::string out;
  REQUIRE(::lseek(fd, 0, SEEK_SET) == 0);
  char buf[65536];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

HashedCopyErrors errors() {
  return {.what = "the test copy",
          .read = [](int err) { return sys_error("read source", err); },
          .write = [](int err) { return sys_error("write dest", err); },
          .too_large = [] { return make_error(ErrorCode::kLimitExceeded, "too large"); }};
}

// The destination's mappings by the hasher, from /proc/self/maps.
size_t mappings_of(int fd) {
  struct stat st{};
  REQUIRE(::fstat(fd, &st) == 0);
  auto maps = files::read_file("/proc/self/maps");
  REQUIRE(maps);
  size_t n = 0;
  std::string inode = " " + std::to_string(st.st_ino) + " ";
  for (size_t at = maps->find(inode); at != std::string::npos; at = maps->find(inode, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("hashed_copy copies a file or a pipe byte for byte and hashes what it wrote") {
  // Both ways: splice with the hash over the mapped destination, and read/write.
  auto access = GENERATE(DestAccess::kPrivate, DestAccess::kShared);
  // Several chunks and a ragged end; large enough for several of the hasher's windows.
  auto data = pattern(GENERATE(5, 37) * (1 << 20) + 12345);
  auto dest = memfd_with("");
  SECTION("from a file") {
    auto source = memfd_with(data);
    auto copied = hashed_copy(source.get(), dest.get(), access, 1ull << 30, errors());
    REQUIRE(copied);
    CHECK(copied->bytes == data.size());
    CHECK(copied->sha256 == sha256_hex(data));
  }
  SECTION("from a pipe fed by another thread") {
    int fds[2];
    REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
    UniqueFd read_end(fds[0]);
    std::thread writer([fd = fds[1], &data] {
      (void)files::write_all(fd, data, "pipe");
      ::close(fd);
    });
    auto copied = hashed_copy(read_end.get(), dest.get(), access, 1ull << 30, errors());
    writer.join();
    REQUIRE(copied);
    CHECK(copied->sha256 == sha256_hex(data));
  }
  CHECK(contents(dest.get()) == data);
  CHECK(mappings_of(dest.get()) == 0);  // every window the hasher used is unmapped
}

TEST_CASE("hashed_copy stops at the size limit, maps nothing after, and reports an empty source") {
  auto dest = memfd_with("");
  // Past the limit after one chunk, and after several of the hasher's windows were mapped.
  for (uint64_t limit : {uint64_t{1} << 20, uint64_t{20} << 20}) {
    auto big = memfd_with(pattern(30 << 20));
    auto copied = hashed_copy(big.get(), dest.get(), DestAccess::kPrivate, limit, errors());
    REQUIRE_FALSE(copied);
    CHECK(copied.error().code == ErrorCode::kLimitExceeded);
    CHECK(mappings_of(dest.get()) == 0);
    REQUIRE(::ftruncate(dest.get(), 0) == 0);
  }
  auto empty = memfd_with("");
  auto none = hashed_copy(empty.get(), dest.get(), DestAccess::kPrivate, 1 << 20, errors());
  REQUIRE(none);
  CHECK(none->bytes == 0);
  CHECK(none->sha256 == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST_CASE("the copies work with a terminal at either end (where splice refuses, by read/write)") {
  int master = -1, slave = -1;
  REQUIRE(::openpty(&master, &slave, nullptr, nullptr, nullptr) == 0);
  UniqueFd m(master), s(slave);
  termios raw{};
  REQUIRE(::tcgetattr(slave, &raw) == 0);
  ::cfmakeraw(&raw);
  REQUIRE(::tcsetattr(slave, TCSANOW, &raw) == 0);
  auto data = pattern(3000);  // under the terminal's buffer: no reader needed while writing

  SECTION("copy_stream into a terminal") {
    auto source = memfd_with(data);
    auto copied = files::copy_stream(source.get(), slave, "source", "the terminal");
    REQUIRE(copied);
    CHECK(*copied == data.size());
    std::string seen;
    char buf[4096];
    while (seen.size() < data.size()) {
      ssize_t n = ::read(master, buf, sizeof buf);
      REQUIRE(n > 0);
      seen.append(buf, static_cast<size_t>(n));
    }
    CHECK(seen == data);
  }
  SECTION("hashed_copy from a terminal") {
    // The terminal ends the copy by timing out: in raw mode with VMIN 0 and VTIME 5, a read
    // with nothing pending returns 0 after half a second. (Closing the master instead
    // drops unread input on some kernels.)
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 5;
    REQUIRE(::tcsetattr(slave, TCSANOW, &raw) == 0);
    REQUIRE(files::write_all(master, data, "the terminal"));
    auto dest = memfd_with("");
    auto copied = hashed_copy(slave, dest.get(), DestAccess::kPrivate, 1 << 20, errors());
    REQUIRE(copied);
    CHECK(copied->bytes == data.size());
    CHECK(copied->sha256 == sha256_hex(data));
    CHECK(contents(dest.get()) == data);
  }
}
