#include "isolation/subordinate_ids.h"

#include <sched.h>
#include <unistd.h>

#include <cstdio>

#include "isolation/sys/files.h"
#include "isolation/sys/forked_call.h"
#include "isolation/sys/program.h"

namespace nsbox::subids {
namespace {

const char* const kSubuid = "/etc/subuid";
const char* const kSubgid = "/etc/subgid";

Result<std::string> helper_path(const char* name) {
  for (const char* dir : {"/usr/bin/", "/bin/", "/usr/sbin/", "/usr/local/bin/"}) {
    std::string path = std::string(dir) + name;
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return fail(make_error(ErrorCode::kUnsupported, std::string("no ") + name + " on this host", "install Debian's uidmap (apt-get install uidmap)"));
}

// The invoking user's name from /etc/passwd (nsbox is linked statically: no NSS). A user
// only a directory service knows is matched by uid, which subuid lines may use too.
std::string own_name() {
  auto text = files::read_file("/etc/passwd", 16 << 20);
  if (!text) return "";
  const std::string uid = std::to_string(::getuid());
  size_t at = 0;
  while (at < text->size()) {
    size_t end = text->find('\n', at);
    std::string line = text->substr(at, end == std::string::npos ? std::string::npos : end - at);
    at = end == std::string::npos ? text->size() : end + 1;
    size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    size_t c = b == std::string::npos ? b : line.find(':', b + 1);
    if (c != std::string::npos && line.compare(b + 1, c - b - 1, uid) == 0) return line.substr(0, a);
  }
  return "";
}

}  // namespace

Range grant_in(const std::string& text, const std::string& name, uint32_t id) {
  size_t at = 0;
  const std::string id_text = std::to_string(id);
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    std::string line = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
    at = end == std::string::npos ? text.size() : end + 1;
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string who = line.substr(0, colon);
    if (who.empty() || (who != name && who != id_text)) continue;
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r')) line.pop_back();
    unsigned long long start = 0, count = 0;
    char rest = 0;
    if (std::sscanf(line.c_str() + colon + 1, "%llu:%llu%c", &start, &count, &rest) != 2) continue;
    // A range holding 0 would map the host's root: never used, whatever the file says.
    if (count == 0 || start == 0 || start > UINT32_MAX || count > UINT32_MAX - start) continue;
    return {static_cast<uint32_t>(start), static_cast<uint32_t>(count)};
  }
  return {};
}

Result<Grant> own_grant() {
  for (const char* helper : {"newuidmap", "newgidmap"}) NSBOX_CHECK(helper_path(helper));
  std::string name = own_name();
  Grant grant;
  for (auto [file, range] : {std::pair{kSubuid, &grant.uids}, std::pair{kSubgid, &grant.gids}}) {
    auto text = files::read_file(file, 1 << 20);
    if (text) *range = grant_in(*text, name, ::getuid());
    if (range->count == 0)
      return fail(make_error(ErrorCode::kUnsupported,
                             std::string(file) + " grants no subordinate ids to " + (name.empty() ? std::to_string(::getuid()) : name),
                             "as root: usermod --add-subuids FIRST-LAST --add-subgids FIRST-LAST " +
                                 (name.empty() ? std::to_string(::getuid()) : name)));
  }
  return grant;
}

Result<void> write_map(pid_t pid, bool gids, const std::vector<MapLine>& lines) {
  const char* helper = gids ? "newgidmap" : "newuidmap";
  std::string path = NSBOX_TRY(helper_path(helper));
  std::vector<std::string> argv = {path, std::to_string(pid)};
  for (const auto& l : lines)
    for (uint32_t v : {l.inside, l.outside, l.count}) argv.push_back(std::to_string(v));
  auto run = sys::run_program(argv, "", {"PATH=/usr/bin:/bin", "LC_ALL=C"}, "", 10.0, 4096, 4096);
  if (run.status == 0) return {};
  std::string said = run.err;
  while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
  return fail(make_error(ErrorCode::kSystem,
                         std::string(helper) + " " + std::to_string(pid) + " " +
                             (run.status < 0 ? "could not start" : sys::describe_wait_status(run.status)) +
                             (said.empty() ? "" : ": " + said.substr(0, 400)),
                         std::string("the ids must be in ") + (gids ? kSubgid : kSubuid) + "'s line for this user"));
}

Result<void> as_root_of_own_grant(const Grant& grant, const std::function<Result<void>()>& work, const std::string& what) {
  uint32_t uid = ::getuid(), gid = ::getgid();
  sys::ChildCall call;
  call.what = what;
  call.timeout_ms = 3'600'000;  // a large tree's removal
  call.prepare = []() -> Result<void> {
    if (::unshare(CLONE_NEWUSER) != 0) return fail(sys_error("unshare(CLONE_NEWUSER)"));
    return {};
  };
  call.in_parent = [&](pid_t child) -> Result<void> {
    NSBOX_CHECK(write_map(child, false, {{0, uid, 1}, {1, grant.uids.start, grant.uids.count}}));
    return write_map(child, true, {{0, gid, 1}, {1, grant.gids.start, grant.gids.count}});
  };
  call.work = [&]() -> Result<sys::ChildAnswer> {
    if (::setresgid(0, 0, 0) != 0) return fail(sys_error("setresgid(0)"));
    if (::setresuid(0, 0, 0) != 0) return fail(sys_error("setresuid(0)"));
    NSBOX_CHECK(sys::rearm_parent_death());  // the id change cleared it
    NSBOX_CHECK(work());
    return sys::ChildAnswer{};
  };
  NSBOX_CHECK(sys::call_in_child(call));
  return {};
}

Result<void> remove_tree(const std::string& path) {
  auto removed = files::remove_tree(path);
  if (removed || ::geteuid() == 0 || (removed.error().sys_errno != EACCES && removed.error().sys_errno != EPERM)) return removed;
  auto grant = own_grant();
  if (!grant) return fail(std::move(removed.error()).context("as the invoking user, and not as owner of its subordinate ids (" + grant.error().message + ")"));
  return as_root_of_own_grant(*grant, [&] { return files::remove_tree(path); }, "remove " + path);
}

}  // namespace nsbox::subids
