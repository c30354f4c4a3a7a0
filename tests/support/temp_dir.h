// A directory under /tmp for one test, removed with what it holds when the object goes.
// Mode 0755: a sandbox's user, or another test user, reads and runs what is put there
// (a tools directory, a wheelhouse, a probe).
#pragma once

#include <string>

namespace nsbox::test {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "nsbox-test");  // /tmp/<prefix>-XXXXXX
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace nsbox::test
