// Hostile code in a sandbox against its snapshots and the host's copies of its files
// (issue 33, finding 6): files made to cost the host disk and time out of proportion to
// what they cost the sandbox, or to make the sandbox's own snapshot unrestorable.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <string>

#include "tests/support/nsbox_cli.h"

using namespace nsbox::test;
using nlohmann::json;

namespace {

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

uint64_t file_size(const std::string& path) {
  struct stat st{};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace

TEST_CASE("sparse files made inside cost a snapshot their data, and it restores into a home of the same size with its holes",
          "[snapshot][sparse]") {
  TestRoot root;
  auto id = root.create();  // the default home: 1 GiB
  // 1 GiB with 164 KiB of data (the review's file), and 4 TiB with 3 bytes: 4 TiB and
  // 1 GiB of zeros on the host, and a snapshot no home could take, if holes were stored.
  REQUIRE(root.sh(id, "truncate -s 1G ~/sparse && head -c 164K /dev/urandom | dd of=$HOME/sparse conv=notrunc status=none && "
                      "printf end | dd of=$HOME/sparse bs=1 seek=$((512 << 20)) conv=notrunc status=none && "
                      "truncate -s 4T ~/huge && printf end >> ~/huge")
              .exit_code == 0);
  std::string before = root.sh(id, "cd ~ && stat -c '%n %s' sparse huge && sha256sum sparse && tail -c 3 huge").out;

  auto made = root.nsbox({"snapshot", "create", "--json", id});
  INFO(made.err);
  REQUIRE(made.exit_code == 0);
  auto snap = TestRoot::json(made);
  CHECK(snap["bytes"].get<uint64_t>() < (1u << 20));
  std::string dir = root.path() + "/data/snapshots/" + snap["id"].get<std::string>();
  CHECK(file_size(dir + "/home.tar") < (1u << 20));

  auto copy = root.nsbox({"create", "--from-snapshot", snap["id"]});
  INFO(copy.err);
  REQUIRE(copy.exit_code == 0);
  std::string restored = first_line(copy.out);
  CHECK(root.sh(restored, "cd ~ && stat -c '%n %s' sparse huge && sha256sum sparse && tail -c 3 huge").out == before);
  // Restored with its holes: what the blocks hold, in KiB.
  auto used = root.sh(restored, "du -k ~/sparse ~/huge | cut -f1");
  REQUIRE(used.exit_code == 0);
  CHECK(std::stoull(used.out) < 1024);
  CHECK(std::stoull(used.out.substr(used.out.find('\n') + 1)) < 1024);
}

