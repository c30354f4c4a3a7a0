#include "tests/support/nsbox_cli.h"

#include <sys/mount.h>

#include <pwd.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

namespace nsbox::test {

std::string nsbox_binary() { return NSBOX_TEST_BIN; }
std::string probe_binary() { return NSBOX_TEST_PROBE; }

namespace {

// The build tree may sit where another user cannot go (a checkout under /root): give the
// rootless tests their own world-readable copy of the installed layout.
std::string stage_install_copy(const std::string& root) {
  namespace fs = std::filesystem;
  fs::path bin = fs::path(nsbox_binary());
  fs::path libexec = bin.parent_path().parent_path() / "libexec" / "nsbox";
  fs::path dest = fs::path(root) / "install";
  fs::create_directories(dest / "bin");
  fs::create_directories(dest / "libexec");
  fs::copy_file(bin, dest / "bin" / "nsbox");
  fs::copy(libexec, dest / "libexec" / "nsbox", fs::copy_options::recursive);
  for (const auto& e : fs::recursive_directory_iterator(dest))
    fs::permissions(e.path(), e.is_directory() || (e.status().permissions() & fs::perms::owner_exec) != fs::perms::none
                                  ? fs::perms(0755) : fs::perms(0644));
  fs::permissions(dest, fs::perms(0755));
  return dest / "bin" / "nsbox";
}

}  // namespace

TestRoot::TestRoot(std::optional<RunAs> as) : as_(as), binary_(nsbox_binary()) {
  char tmpl[] = "/tmp/nsbox-test-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  path_ = tmpl;
  if (!as_) return;
  try {
    REQUIRE(::chmod(path_.c_str(), 0755) == 0);
    binary_ = stage_install_copy(path_);
    REQUIRE(::chown(path_.c_str(), as_->uid, as_->gid) == 0);
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);  // no destructor runs for a failed constructor
    throw;
  }
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
  std::vector<std::string> argv = {binary_, "--root", path_};
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

std::string TestRoot::download(const std::string& id, const std::string& path) const {
  std::string relative = path.rfind("/mnt/files/", 0) == 0 ? path.substr(11) : path;
  auto r = nsbox({"files", id, "download", relative, "-"});
  INFO("download " << path << ": " << r.err);
  REQUIRE(r.exit_code == 0);
  return r.out;
}

void TestRoot::install_probe(const std::string& id) const {
  std::string probe = probe_binary();
  if (as_) {  // the other user must be able to read it
    probe = path_ + "/install/probe";
    std::filesystem::copy_file(probe_binary(), probe, std::filesystem::copy_options::overwrite_existing);
    std::filesystem::permissions(probe, std::filesystem::perms(0755));
  }
  auto r = nsbox({"files", id, "upload", probe, "probe"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
}

std::optional<RunAs> rootless_user() {
  passwd* pw = ::getpwnam("nsbox-rootless");
  if (!pw) return std::nullopt;
  return RunAs{pw->pw_uid, pw->pw_gid};
}

SmallDisk::SmallDisk(const TestRoot& parent, const std::string& size) : path_(parent.path() + "/small-disk") {
  REQUIRE(::mkdir(path_.c_str(), 0700) == 0);
  REQUIRE(::mount("tmpfs", path_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, ("size=" + size + ",mode=0700").c_str()) == 0);
}

SmallDisk::~SmallDisk() {
  // The sandboxes first: they hold the images and mounts that live on the disk.
  auto ls = nlohmann::json::parse(nsbox({"ls", "--json"}).out, nullptr, false);
  if (!ls.is_discarded())
    for (const auto& sb : ls.value("sandboxes", nlohmann::json::array())) nsbox({"rm", sb.value("id", "")});
  ::umount2(path_.c_str(), MNT_DETACH);
}

ProcessResult SmallDisk::nsbox(std::vector<std::string> args, const std::vector<std::string>& env) const {
  args.insert(args.begin(), {nsbox_binary(), "--root", path_});
  return run_process(args, {.timeout_s = 120, .extra_env = env});
}

}  // namespace nsbox::test
