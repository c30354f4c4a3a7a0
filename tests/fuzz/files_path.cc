// Paths a caller gives for files in a sandbox: relative to /mnt/files for the files API
// (`nsbox files ID upload|ls|download|rm`, the HTTP API's .../files?path=), as
// FilesVolume::normalize checks them before any of them reaches openat2(RESOLVE_BENEATH);
// and anywhere in the sandbox for the HTTP API's fs endpoints and a create's workspace
// manifest (SandboxFs::normalize). The input is the path (URL-decoded already).
//
// Checks: what FilesVolume::normalize accepts is relative, has no empty, '.' or '..'
// segment, keeps the input's segments in order, and normalizes to itself; a path with a
// '..' segment, a NUL byte or a leading '/' is refused. What SandboxFs::normalize accepts
// is absolute, plain (no empty, '.' or '..' segment), without NUL, outside /proc, /sys and
// /dev, and normalizes to itself.
//
// Found here: a NUL byte was accepted, and the system calls saw the path end there:
// remove("..\0x", recursive) emptied the volume's parent directory (corpus/files_path/
// nul-parent; tests/unit/files_volume_test.cc).
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "mounts/files_volume.h"
#include "runtime/client/sandbox_fs.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

std::vector<std::string> segments(const std::string& path) {
  std::vector<std::string> out;
  std::stringstream parts(path);
  for (std::string part; std::getline(parts, part, '/');) out.push_back(part);
  return out;
}

void check_sandbox_path(const std::string& path) {
  auto normal = nsbox::SandboxFs::normalize(path);
  if (!normal) return;
  FUZZ_CHECK(!normal->empty() && normal->front() == '/');
  FUZZ_CHECK(normal->find('\0') == std::string::npos);
  FUZZ_CHECK(*normal == "/" || normal->back() != '/');
  if (*normal != "/")
    for (const auto& s : segments(normal->substr(1))) FUZZ_CHECK(!s.empty() && s != "." && s != "..");
  for (const char* place : {"/proc", "/sys", "/dev"})
    FUZZ_CHECK(*normal != place && !normal->starts_with(std::string(place) + "/"));
  auto again = nsbox::SandboxFs::normalize(*normal);
  FUZZ_CHECK(again && *again == *normal);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string path(reinterpret_cast<const char*>(data), size);
  check_sandbox_path(path);
  auto normal = nsbox::FilesVolume::normalize(path);

  std::vector<std::string> kept;
  bool dotdot = false;
  for (const auto& s : segments(path)) {
    if (s == "..") dotdot = true;
    if (!s.empty() && s != ".") kept.push_back(s);
  }
  if (path.empty() || path[0] == '/' || dotdot || path.find('\0') != std::string::npos) {
    FUZZ_CHECK(!normal);
    return 0;
  }
  FUZZ_CHECK(normal.has_value());
  FUZZ_CHECK(segments(*normal) == kept || (normal->empty() && kept.empty()));
  FUZZ_CHECK(normal->empty() || (normal->front() != '/' && normal->back() != '/'));
  if (!normal->empty()) {
    auto again = nsbox::FilesVolume::normalize(*normal);
    FUZZ_CHECK(again && *again == *normal);
    FUZZ_CHECK(nsbox::FilesVolume::inside_path(*normal).starts_with("/mnt/files/"));
  }
  return 0;
}
