// Signed download links: the server's master key and a sandbox's derived key
// (runtime/links/download_link.h).
#include <catch2/catch.hpp>

#include "runtime/links/download_link.h"

using nsbox::links::LinkSigner;
using nsbox::links::sandbox_link_key;

namespace {

const std::string kMaster(32, 'm');
constexpr int64_t kExpires = 2000000000;

}  // namespace

TEST_CASE("a sandbox's link key signs links the server's master key accepts, for that sandbox only") {
  LinkSigner server(kMaster);
  LinkSigner bridge = LinkSigner::of_sandbox(sandbox_link_key(kMaster, "sbx-a"), "sbx-a");
  std::string signature = bridge.sign("sbx-a", "/mnt/files/report.csv", kExpires);
  CHECK_FALSE(signature.empty());
  CHECK(signature == server.sign("sbx-a", "/mnt/files/report.csv", kExpires));
  CHECK(server.verify("sbx-a", "/mnt/files/report.csv", kExpires, signature, kExpires - 1));
  CHECK_FALSE(server.verify("sbx-a", "/mnt/files/report.csv", kExpires, signature, kExpires));  // expired
  CHECK_FALSE(server.verify("sbx-a", "/mnt/files/other.csv", kExpires, signature, 0));
  CHECK_FALSE(server.verify("sbx-b", "/mnt/files/report.csv", kExpires, signature, 0));
  // Another sandbox's links: not signed, and its key cannot be made to sign them.
  CHECK(bridge.sign("sbx-b", "/mnt/files/report.csv", kExpires).empty());
  LinkSigner forged = LinkSigner::of_sandbox(sandbox_link_key(kMaster, "sbx-a"), "sbx-b");
  CHECK_FALSE(server.verify("sbx-b", "/x", kExpires, forged.sign("sbx-b", "/x", kExpires), 0));
  CHECK_FALSE(bridge.verify("sbx-b", "/x", kExpires, "", 0));
}

TEST_CASE("a sandbox's link key is neither the master key nor another sandbox's") {
  std::string a = sandbox_link_key(kMaster, "sbx-a");
  CHECK(a.size() == 43);  // base64url of 32 bytes: text, as keys travel in JSON
  CHECK(a != kMaster);
  CHECK(a != sandbox_link_key(kMaster, "sbx-b"));
  CHECK(a != sandbox_link_key(std::string(32, 'n'), "sbx-a"));
  CHECK(a == sandbox_link_key(kMaster, "sbx-a"));
  // A link signed with the master key itself, as before the keys were derived, opens nothing.
  LinkSigner as_before = LinkSigner::of_sandbox(kMaster, "sbx-a");
  CHECK_FALSE(LinkSigner(kMaster).verify("sbx-a", "/x", kExpires, as_before.sign("sbx-a", "/x", kExpires), 0));
}
