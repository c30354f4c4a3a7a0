// The files API's paths (mounts/files_volume.h), on a volume in a temporary directory.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "mounts/files_volume.h"
#include "tests/support/temp_dir.h"

using nsbox::FilesVolume;

// A caller of the HTTP API can send "..\u0000x": the system calls would see ".." (the
// fuzz target files_path found it; tests/fuzz/corpus/files_path/nul-parent). Before the
// check, removing it emptied the volume's parent: every other volume beside it.
TEST_CASE("a files path holding a NUL byte is refused, and removing one leaves the volume's parent alone") {
  nsbox::test::TempDir parent("nsbox-test-volumes");
  std::string mine = parent.path() + "/mine", other = parent.path() + "/other";
  REQUIRE(std::filesystem::create_directory(mine));
  REQUIRE(std::filesystem::create_directory(other));
  std::ofstream(other + "/precious") << "another sandbox's file";
  auto volume = FilesVolume::open(mine, ::geteuid(), ::getegid());
  REQUIRE(volume);

  const std::string dotdot_nul("..\0x", 4), plain_nul("a\0b", 3);
  for (const std::string& path : {dotdot_nul, plain_nul}) {
    auto normal = FilesVolume::normalize(path);
    CHECK(!normal);
    if (!normal) CHECK(normal.error().message.find("NUL") != std::string::npos);
  }
  CHECK(!volume->remove(dotdot_nul, /*recursive=*/true));
  CHECK(!volume->make_dirs(plain_nul));
  CHECK(!volume->create_file(plain_nul));
  struct stat st{};
  CHECK(!volume->open_file(plain_nul, &st));
  CHECK(!volume->list(dotdot_nul, 10, ""));

  CHECK(std::filesystem::exists(other + "/precious"));
  CHECK(std::filesystem::exists(mine));
  CHECK(std::filesystem::is_empty(mine));  // nothing named "a" was made either
}
