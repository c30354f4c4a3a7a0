#include "isolation/userns.h"

#include <grp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "isolation/subordinate_ids.h"
#include "isolation/sys/files.h"

namespace nsbox::userns {

namespace {

// Root inside a user namespace of its own (a Kubernetes pod with hostUsers: false maps
// 65,536 ids) can map only ids its namespace has: kRootModeHostId when it is there (the
// initial namespace maps them all), else the highest id the namespace maps, which no
// image's account uses (65534, nobody, is skipped).
uint32_t root_mode_id(const char* map_file) {
  auto text = files::read_file(map_file, 64 << 10);
  if (!text) return kRootModeHostId;
  uint64_t top = 0;
  bool has_default = false;
  size_t at = 0;
  while (at < text->size()) {
    size_t end = text->find('\n', at);
    std::string line = text->substr(at, end == std::string::npos ? std::string::npos : end - at);
    at = end == std::string::npos ? text->size() : end + 1;
    unsigned long long inside = 0, outside = 0, count = 0;
    if (std::sscanf(line.c_str(), "%llu %llu %llu", &inside, &outside, &count) != 3 || count == 0) continue;
    if (kRootModeHostId >= inside && kRootModeHostId - inside < count) has_default = true;
    top = std::max<uint64_t>(top, inside + count - 1);
  }
  if (has_default || top == 0) return kRootModeHostId;
  if (top == 65534 && top > kSandboxUid + 1) --top;
  return static_cast<uint32_t>(top);
}

}  // namespace

HostIds host_ids() {
  if (::geteuid() == 0) {
    static const HostIds root_mode = [] {
      uid_t uid = root_mode_id("/proc/self/uid_map");
      gid_t gid = root_mode_id("/proc/self/gid_map");
      return HostIds{uid, gid, uid, gid};
    }();
    return root_mode;
  }
  return {::geteuid(), ::getegid()};
}

namespace {

// Inside 999 (kSystemUid) is the grant's first id.
HostIds with_grant(HostIds ids, const subids::Grant& grant) {
  ids.accounts_uid = grant.uids.start + (kSandboxUid - kSystemUid);
  ids.accounts_gid = grant.gids.start + (kSandboxGid - kSystemGid);
  return ids;
}

Result<subids::Grant> grant_for_accounts() {
  auto grant = subids::own_grant();
  if (!grant)
    return fail(std::move(grant.error())
                    .context("a rootless sandbox with users of its own maps them to subordinate ids (or run nsbox as root)"));
  return grant;
}

}  // namespace

Result<HostIds> with_accounts(HostIds ids) {
  if (ids.accounts_uid != 0) return ids;
  return with_grant(ids, NSBOX_TRY(grant_for_accounts()));
}

uid_t host_uid(HostIds ids, uid_t inside) { return inside == kSandboxUid ? ids.uid : ids.accounts_uid + (inside - kSandboxUid); }
gid_t host_gid(HostIds ids, gid_t inside) { return inside == kSandboxGid ? ids.gid : ids.accounts_gid + (inside - kSandboxGid); }

namespace {

// Rootless: the accounts' ids among the invoking user's subordinate ones, through
// newuidmap and newgidmap (which refuse anything the grant does not hold).
Result<void> write_maps_through_helpers(pid_t child, HostIds ids, const ExtraIds& extra) {
  auto grant = NSBOX_TRY(grant_for_accounts());
  ids = with_grant(ids, grant);
  // One line per id, each within the grant (an account's uid must be below 999 + count).
  auto line = [](uint32_t inside, uint32_t host, const subids::Range& granted, const char* kind) -> Result<subids::MapLine> {
    if (!granted.holds(host))
      return fail(make_error(ErrorCode::kLimitExceeded,
                             std::string(kind) + " " + std::to_string(inside) + " needs " + std::to_string(inside - kSystemUid + 1) +
                                 " subordinate " + kind + "s; /etc/sub" + kind + " grants " + std::to_string(granted.count),
                             std::string("declare a smaller ") + kind + ", or grant more (usermod --add-sub" + kind + "s)"));
    return subids::MapLine{inside, host, 1};
  };
  std::vector<subids::MapLine> uid_lines = {{kSandboxUid, ids.uid, 1}}, gid_lines = {{kSandboxGid, ids.gid, 1}};
  for (uid_t u : extra.uids) uid_lines.push_back(NSBOX_TRY(line(u, host_uid(ids, u), grant.uids, "uid")));
  for (gid_t g : extra.gids) gid_lines.push_back(NSBOX_TRY(line(g, host_gid(ids, g), grant.gids, "gid")));
  NSBOX_CHECK_CTX(subids::write_map(child, false, uid_lines), "map the sandbox's accounts");
  NSBOX_CHECK_CTX(subids::write_map(child, true, gid_lines), "map the sandbox's accounts' groups");
  return {};
}

}  // namespace

Result<void> write_maps(pid_t child, HostIds ids, const ExtraIds& extra) {
  if (!extra.empty() && ::geteuid() != 0) return write_maps_through_helpers(child, ids, extra);
  std::string proc = "/proc/" + std::to_string(child);
  // Unprivileged, the gid map may only be written after setgroups is denied (and the
  // user's own supplementary groups then stay: the kernel allows no way to drop them).
  // As root, setgroups stays allowed so the child can drop root's groups itself, and
  // without capabilities the sandbox can never call it again.
  if (::geteuid() != 0) NSBOX_CHECK(files::write_file(proc + "/setgroups", "deny"));
  std::string uid_map = std::to_string(kSandboxUid) + " " + std::to_string(ids.uid) + " 1\n";
  for (uid_t u : extra.uids) uid_map += std::to_string(u) + " " + std::to_string(host_uid(ids, u)) + " 1\n";
  std::string gid_map = std::to_string(kSandboxGid) + " " + std::to_string(ids.gid) + " 1\n";
  for (gid_t g : extra.gids) gid_map += std::to_string(g) + " " + std::to_string(host_gid(ids, g)) + " 1\n";
  auto mapped = files::write_file(proc + "/uid_map", uid_map);
  if (mapped) mapped = files::write_file(proc + "/gid_map", gid_map);
  if (!mapped && !extra.empty())
    return fail(std::move(mapped.error())
                    .context("map the sandbox's accounts to host ids " + std::to_string(ids.uid) + " and up (this host's user "
                             "namespace must map them)"));
  return mapped;
}

Result<void> become_sandbox_user_in_child() {
  // Root's supplementary groups would otherwise follow the child and give it group
  // access to host files.
  if (::setgroups(0, nullptr) != 0 && errno != EPERM) return fail(sys_error("setgroups(0)"));
  if (::setresgid(kSandboxGid, kSandboxGid, kSandboxGid) != 0) return fail(sys_error("setresgid(1000)"));
  if (::setresuid(kSandboxUid, kSandboxUid, kSandboxUid) != 0) return fail(sys_error("setresuid(1000)"));
  return {};
}

Result<void> become_system_user_in_child() {
  if (::setresgid(kSystemGid, kSystemGid, kSystemGid) != 0) return fail(sys_error("setresgid(999)"));
  if (::setresuid(kSystemUid, kSystemUid, kSystemUid) != 0) return fail(sys_error("setresuid(999)"));
  return {};
}

Result<void> become_sandbox_user_keeping_saved_root_in_child() {
  // EPERM where the user namespace denies setgroups is fine only if there is no group to drop.
  if (::setgroups(0, nullptr) != 0 && errno != EPERM) return fail(sys_error("setgroups(0)"));
  if (::getgroups(0, nullptr) != 0) return fail(make_error(ErrorCode::kInternal, "supplementary groups left after setgroups(0)"));
  if (::setresgid(kSandboxGid, kSandboxGid, static_cast<gid_t>(-1)) != 0) return fail(sys_error("setresgid(1000, 1000, -1)"));
  if (::setresuid(kSandboxUid, kSandboxUid, static_cast<uid_t>(-1)) != 0) return fail(sys_error("setresuid(1000, 1000, -1)"));
  return {};
}

Result<void> drop_saved_root_in_child() {
  if (::setresgid(static_cast<gid_t>(-1), static_cast<gid_t>(-1), kSandboxGid) != 0) return fail(sys_error("setresgid(-1, -1, 1000)"));
  if (::setresuid(static_cast<uid_t>(-1), static_cast<uid_t>(-1), kSandboxUid) != 0) return fail(sys_error("setresuid(-1, -1, 1000)"));
  uid_t r, e, saved;
  gid_t rg, eg, savedg;
  if (::getresuid(&r, &e, &saved) != 0 || r != kSandboxUid || e != r || saved != r || ::getresgid(&rg, &eg, &savedg) != 0 ||
      rg != kSandboxGid || eg != rg || savedg != rg)
    return fail(make_error(ErrorCode::kInternal, "its ids are not all the sandbox user's after the saved ones were set"));
  return {};
}

}  // namespace nsbox::userns
