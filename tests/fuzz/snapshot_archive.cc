// What a snapshot's archive can hold when nsbox did not write it (runtime/archive/
// tree_archive.h): a restore reads it before anything is written. The first byte picks:
//   0: the bytes as an archive, through check() (what `start --from-snapshot` runs first)
//   1: a member name, through clean_member_name()
//   2: a symlink (member NUL target), through link_stays_inside()
//
// Checks: a clean name is relative, has no empty, `.` or `..` component and is a fixed
// point; a link that stays inside resolves (by an independent resolver) within the root;
// check() either accepts, with counts within its limits (sparse maps' runs and sizes with
// their holes included), or says why.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/archive/tree_archive.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using namespace nsbox::snapshot;

std::vector<std::string_view> parts(std::string_view path) {
  std::vector<std::string_view> out;
  while (!path.empty()) {
    size_t slash = path.find('/');
    out.push_back(path.substr(0, slash));
    path.remove_prefix(slash == std::string_view::npos ? path.size() : slash + 1);
  }
  return out;
}

void member_name(const std::string& name) {
  auto clean = clean_member_name(name);
  if (!clean) {
    FUZZ_CHECK(clean.error().message.find("refused") != std::string::npos);
    return;
  }
  FUZZ_CHECK(!clean->empty() && clean->front() != '/' && clean->back() != '/');
  for (auto p : parts(*clean)) FUZZ_CHECK(!p.empty() && p != "." && p != "..");
  auto again = clean_member_name(*clean);
  FUZZ_CHECK(again && *again == *clean);
}

// Depth reached below the root, walking the link's directory then its target; -1 if it
// ever climbs above the root.
int depth_after(std::string_view member, std::string_view target) {
  auto dirs = parts(member);
  if (!dirs.empty()) dirs.pop_back();
  int depth = 0;
  for (auto d : dirs)
    if (!d.empty() && d != ".") ++depth;
  for (auto p : parts(target)) {
    if (p.empty() || p == ".") continue;
    if (p == "..") {
      if (--depth < 0) return -1;
    } else {
      ++depth;
    }
  }
  return depth;
}

void symlink_target(std::string_view text) {
  size_t nul = text.find('\0');
  if (nul == std::string_view::npos) return;
  auto member = clean_member_name(std::string(text.substr(0, nul)));
  if (!member) return;
  std::string target(text.substr(nul + 1));
  bool inside = link_stays_inside(*member, target);
  bool resolves = !target.empty() && target.front() != '/' && depth_after(*member, target) >= 0;
  FUZZ_CHECK(inside == resolves);
}

void archive_bytes(std::string_view bytes) {
  int fd = ::memfd_create("archive", MFD_CLOEXEC);
  if (fd < 0) return;
  if (::write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size()) || ::lseek(fd, 0, SEEK_SET) != 0) {
    ::close(fd);
    return;
  }
  ArchiveLimits limits{1000, 1 << 20, 1ull << 40, 64};
  auto r = check(fd, limits);
  if (r) {
    FUZZ_CHECK(r->members <= limits.max_members);
    FUZZ_CHECK(r->bytes <= limits.max_bytes);
    FUZZ_CHECK(r->apparent_bytes <= limits.max_apparent_bytes);
    FUZZ_CHECK(::lseek(fd, 0, SEEK_CUR) == 0);  // rewound for the extraction
  } else {
    FUZZ_CHECK(!r.error().message.empty());
  }
  ::close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: archive_bytes(rest); break;
    case 1: member_name(std::string(rest)); break;
    case 2: symlink_target(rest); break;
  }
  return 0;
}
