// Removing trees a sandbox made: deep, unreadable, with symlinks pointing out.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "isolation/sys/files.h"

namespace {

std::string temp_dir() {
  char tmpl[] = "/tmp/nsbox-test-tree-XXXXXX";
  REQUIRE(::mkdtemp(tmpl));
  return tmpl;
}

// A chain of `depth` directories with long names below `top`, built by relative steps
// (the whole path is far past PATH_MAX), with a file at the bottom.
void make_chain(const std::string& top, int depth) {
  int fd = ::open(top.c_str(), O_RDONLY | O_DIRECTORY);
  REQUIRE(fd >= 0);
  std::string name(250, 'd');
  for (int i = 0; i < depth; ++i) {
    REQUIRE(::mkdirat(fd, name.c_str(), 0755) == 0);
    int next = ::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY);
    ::close(fd);
    REQUIRE(next >= 0);
    fd = next;
  }
  int file = ::openat(fd, "leaf", O_WRONLY | O_CREAT, 0644);
  ::close(file);
  ::close(fd);
}

}  // namespace

TEST_CASE("a tree deeper than the fds kept open is removed, fully") {
  std::string dir = temp_dir();
  make_chain(dir + "", 300);  // more levels than the 64 kept open: some are opened again
  REQUIRE(nsbox::files::remove_tree(dir));
  CHECK_FALSE(nsbox::files::exists(dir));
}

TEST_CASE("a wide directory and a symlink pointing out are removed without following it") {
  std::string dir = temp_dir(), outside = temp_dir();
  std::ofstream(outside + "/keep") << "keep";
  std::filesystem::create_directories(dir + "/v/sub");
  for (int i = 0; i < 5000; ++i) std::ofstream(dir + "/v/f" + std::to_string(i));
  std::filesystem::create_directory_symlink(outside, dir + "/v/sub/out");
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  REQUIRE(fd >= 0);
  auto r = nsbox::files::remove_tree_at(fd, "v", "v");
  ::close(fd);
  REQUIRE(r);
  CHECK_FALSE(nsbox::files::exists(dir + "/v"));
  CHECK(nsbox::files::exists(outside + "/keep"));
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(outside);
}

// As root, mode 0 stops nothing; the rootless case (where it did) is in hostile_test.cc.
TEST_CASE("directories left unreadable and unwritable are removed") {
  std::string dir = temp_dir();
  std::filesystem::create_directories(dir + "/a/b/c");
  std::ofstream(dir + "/a/b/c/x") << "x";
  REQUIRE(::chmod((dir + "/a/b").c_str(), 0) == 0);
  REQUIRE(::chmod((dir + "/a").c_str(), 0500) == 0);
  REQUIRE(nsbox::files::remove_tree(dir));
  CHECK_FALSE(nsbox::files::exists(dir));
}
