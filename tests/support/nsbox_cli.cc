#include "tests/support/nsbox_cli.h"

#include <pwd.h>
#include <stdlib.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

namespace nsbox::test {

std::string nsbox_binary() { return NSBOX_TEST_BIN; }
std::string probe_binary() { return NSBOX_TEST_PROBE; }

TestRoot::TestRoot(std::optional<RunAs> as) : as_(as) {
  char tmpl[] = "/tmp/nsbox-test-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  path_ = tmpl;
  if (as_) REQUIRE(::chown(path_.c_str(), as_->uid, as_->gid) == 0);
}

TestRoot::~TestRoot() {
  // Remove whatever the test left running, then the root itself.
  auto ls = nsbox({"ls", "--json"});
  if (ls.exit_code == 0) {
    auto doc = nlohmann::json::parse(ls.out, nullptr, false);
    if (!doc.is_discarded())
      for (const auto& sb : doc.value("sandboxes", nlohmann::json::array())) nsbox({"rm", sb.value("id", "")});
  }
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

ProcessResult TestRoot::nsbox(const std::vector<std::string>& args, const ProcessOptions& options) const {
  std::vector<std::string> argv = {nsbox_binary(), "--root", path_};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcessOptions o = options;
  if (as_ && !o.as) o.as = as_;
  return run_process(argv, o);
}

nlohmann::json TestRoot::json(const ProcessResult& r) {
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE_FALSE(j.is_discarded());
  return j;
}

std::string TestRoot::create(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"create", "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto r = nsbox(args);
  INFO("create stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  return json(r).at("id").get<std::string>();
}

ProcessResult TestRoot::sh(const std::string& id, const std::string& command_line, const std::vector<std::string>& flags,
                           const ProcessOptions& options) const {
  std::vector<std::string> args = {"sh", id};
  args.insert(args.end(), flags.begin(), flags.end());
  args.push_back("--");
  args.push_back(command_line);
  return nsbox(args, options);
}

std::string TestRoot::files_dir(const std::string& id) const {
  auto r = nsbox({"inspect", "--json", id});
  REQUIRE(r.exit_code == 0);
  return json(r).at("files_dir").get<std::string>();
}

void TestRoot::install_probe(const std::string& id) const {
  std::string dest = files_dir(id) + "/probe";
  std::filesystem::copy_file(probe_binary(), dest, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::permissions(dest, std::filesystem::perms(0755));
}

std::optional<RunAs> rootless_user() {
  passwd* pw = ::getpwnam("nsbox-rootless");
  if (!pw) return std::nullopt;
  return RunAs{pw->pw_uid, pw->pw_gid};
}

}  // namespace nsbox::test
