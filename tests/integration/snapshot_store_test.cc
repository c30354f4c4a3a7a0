// Snapshots in a bucket (`--snapshot-store s3://...`, docs/semantics.md "Snapshots"): made
// on one state root and restored on another (as another machine would), listed only once
// whole, removed from the bucket, and the credentials never written anywhere.
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "isolation/sys/files.h"
#include "tests/support/host_features.h"
#include "tests/support/nsbox_cli.h"
#include "tests/support/object_store_peers.h"

using namespace nsbox::test;
using nlohmann::json;

namespace {

constexpr const char* kSecret = "nsbox-snapstore-secret-7c1d";

// Every file under `dir`, as text, for a check that a secret is in none of them.
bool any_file_holds(const std::string& dir, const std::string& needle) {
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec); it != std::filesystem::recursive_directory_iterator();
       it.increment(ec)) {
    if (ec) break;
    if (!it->is_regular_file(ec) || it->is_symlink(ec)) continue;
    auto text = nsbox::files::read_file(it->path().string(), 64 << 20);
    if (text && text->find(needle) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("snapshots in a bucket: made on one root, listed and restored on another, removed from the bucket", "[s3]") {
  NSBOX_NEEDS(node_peers());
  S3rverPeer s3({"snaps"});
  auto env = s3_credentials_env(s3, kSecret);
  const std::string store = "s3://snaps/team";
  TestRoot first, second;
  auto id = first.create({"--name", "origin"});
  REQUIRE(first.sh(id, "mkdir -p ~/proj && echo kept > ~/proj/a.txt && echo data > /mnt/files/d.txt").exit_code == 0);
  auto made = first.nsbox({"snapshot", "create", "--json", "--snapshot-store", store, id, "--name", "shared", "--include-files"},
                          {.extra_env = env});
  INFO(made.err);
  REQUIRE(made.exit_code == 0);
  std::string snap = TestRoot::json(made)["id"];
  // Nothing of it stays on the first root: the bucket holds it.
  CHECK_FALSE(std::filesystem::exists(first.path() + "/data/snapshots/" + snap));
  CHECK(std::filesystem::exists(s3.data_dir()));

  // Another root (another machine) with the same store lists it and restores it.
  auto listed = second.nsbox({"snapshot", "ls", "--json", "--snapshot-store", store}, {.extra_env = env});
  INFO(listed.err);
  REQUIRE(listed.exit_code == 0);
  auto snapshots = TestRoot::json(listed)["snapshots"];
  REQUIRE(snapshots.size() == 1);
  CHECK(snapshots[0]["id"] == snap);
  CHECK(snapshots[0]["name"] == "shared");
  auto restored = second.nsbox({"create", "--snapshot-store", store, "--from-snapshot", "shared"}, {.extra_env = env});
  INFO(restored.err);
  REQUIRE(restored.exit_code == 0);
  std::string again = restored.out.substr(0, restored.out.find('\n'));
  CHECK(second.sh(again, "cat ~/proj/a.txt /mnt/files/d.txt").out == "kept\ndata\n");
  // Nothing fetched is left behind.
  for (const auto& name : nsbox::files::list_dir(second.path() + "/data/snapshots").value_or(std::vector<std::string>{}))
    CHECK_FALSE(name.starts_with(".fetching-"));

  // Without credentials: a clear error naming the store, nothing else.
  auto anonymous = second.nsbox({"snapshot", "ls", "--snapshot-store", "s3://no-such-bucket/x"}, {.extra_env = env});
  CHECK(anonymous.exit_code != 0);
  CHECK(anonymous.err.find("s3://no-such-bucket/x") != std::string::npos);

  auto removed = second.nsbox({"snapshot", "rm", "--snapshot-store", store, snap}, {.extra_env = env});
  INFO(removed.err);
  CHECK(removed.exit_code == 0);
  CHECK(TestRoot::json(first.nsbox({"snapshot", "ls", "--json", "--snapshot-store", store}, {.extra_env = env}))["snapshots"].empty());
  auto gone = second.nsbox({"create", "--snapshot-store", store, "--from-snapshot", snap}, {.extra_env = env});
  CHECK(gone.exit_code != 0);
  CHECK(gone.err.find("no snapshot") != std::string::npos);

  // The secret is in no file of either root, nor in what the bucket holds.
  CHECK_FALSE(any_file_holds(first.path(), kSecret));
  CHECK_FALSE(any_file_holds(second.path(), kSecret));
  CHECK_FALSE(any_file_holds(s3.data_dir(), kSecret));
}
