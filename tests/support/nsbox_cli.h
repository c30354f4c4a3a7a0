// Driving the real `nsbox` binary from tests, each test with its own state root.
//
//   TestRoot root;                       // /tmp/nsbox-test-XXXXXX, removed with its sandboxes
//   auto id = root.create({"--size", "medium"});
//   auto r = root.sh(id, "id -u");       // bash -c inside the sandbox
//   CHECK(r.out == "1000\n");
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/process.h"

namespace nsbox::test {

std::string nsbox_binary();
std::string probe_binary();

class TestRoot {
 public:
  explicit TestRoot(std::optional<RunAs> as = std::nullopt);
  ~TestRoot();
  TestRoot(const TestRoot&) = delete;
  TestRoot& operator=(const TestRoot&) = delete;

  const std::string& path() const { return path_; }

  // nsbox --root <path> ARGS...
  ProcessResult nsbox(const std::vector<std::string>& args, const ProcessOptions& options = {}) const;
  // Parses stdout as the one JSON document of a --json command.
  static nlohmann::json json(const ProcessResult& r);

  // Creates a sandbox (REQUIREs success) and returns its id.
  std::string create(const std::vector<std::string>& extra = {});
  // Runs a bash command line in the sandbox.
  ProcessResult sh(const std::string& id, const std::string& command_line, const std::vector<std::string>& flags = {},
                   const ProcessOptions& options = {}) const;
  // Uploads the probe binary into the sandbox's /mnt/files (as /mnt/files/probe).
  void install_probe(const std::string& id) const;
  // A file of the sandbox's /mnt/files, read through `nsbox files ID download PATH -`
  // (`path` may start with /mnt/files/).
  std::string download(const std::string& id, const std::string& path) const;

 private:
  std::string path_;
  std::optional<RunAs> as_;
  std::string binary_;  // nsbox_binary(), or a copy the other user can reach
};

// A second state root on a disk of its own, small (a tmpfs of `size`, e.g. "3g"), under
// `parent`: for what happens when a disk fills. Its sandboxes are removed before the disk
// goes.
class SmallDisk {
 public:
  SmallDisk(const TestRoot& parent, const std::string& size);
  ~SmallDisk();
  SmallDisk(const SmallDisk&) = delete;
  SmallDisk& operator=(const SmallDisk&) = delete;

  const std::string& path() const { return path_; }
  // nsbox --root <path> ARGS..., with `env` added to its environment.
  ProcessResult nsbox(std::vector<std::string> args, const std::vector<std::string>& env = {}) const;

 private:
  std::string path_;
};

// The host-side test user for rootless tests (created by the CTest fixture).
std::optional<RunAs> rootless_user();

}  // namespace nsbox::test
