// OCI images in the store (docs/images.md): pulled from a layout, an oci-archive and a
// docker-archive that tests/images/make_image.py makes offline, each blob verified, layers
// unpacked once and shared, whiteouts honoured in the merged tree, a tampered image
// refused with nothing kept, and removal collecting what no image has any more.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <set>

#include "isolation/sys/files.h"
#include "tests/support/host_features.h"
#include "tests/support/nsbox_cli.h"
#include "tests/support/temp_dir.h"

using namespace nsbox::test;
namespace fs = std::filesystem;

namespace {

// An image made by tests/images/make_image.py: FORMAT into OUT, with its flags.
void make_image(const std::string& format, const std::string& out, const std::vector<std::string>& flags = {}) {
  std::vector<std::string> argv = {"/usr/bin/python3.11", std::string(NSBOX_SOURCE_DIR) + "/tests/images/make_image.py", format, out};
  argv.insert(argv.end(), flags.begin(), flags.end());
  auto r = run_process(argv);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
}

// Every path under the store, for "nothing was kept" (the lock file aside).
std::set<std::string> store_contents(const std::string& root) {
  std::set<std::string> out;
  std::string dir = root + "/data/images";
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().filename() != ".lock") out.insert(e.path().string());
  return out;
}

struct stat lstat_of(const std::string& path) {
  struct stat st{};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st;
}

// A pulled image with a shell (a static busybox, tests/images/make_image.py --busybox),
// named NAME; false (and the test skipped) where the host has no static busybox.
bool pull_busybox_image(const TestRoot& root, const TempDir& made, const std::string& name) {
  if (!fs::exists("/bin/busybox")) return false;
  make_image("oci", made.path() + "/" + name, {"--busybox", "/bin/busybox", "--marker", name});
  auto r = root.nsbox({"image", "pull", "oci:" + made.path() + "/" + name, "--name", name});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return true;
}

}  // namespace

TEST_CASE("images: a layout, an oci-archive and a docker-archive are pulled and verified, and a layer they share is stored once",
          "[images]") {
  TempDir made("nsbox-images");
  make_image("oci", made.path() + "/layout", {"--marker", "one"});
  make_image("oci-archive", made.path() + "/o.tar", {"--marker", "two"});
  make_image("docker-archive", made.path() + "/d.tar", {"--marker", "three", "--name", "docker/img:v1"});
  TestRoot root;
  auto layout = root.nsbox({"image", "pull", "--json", "oci:" + made.path() + "/layout", "--name", "test/one"});
  INFO(layout.err);
  REQUIRE(layout.exit_code == 0);
  auto one = TestRoot::json(layout);
  CHECK(one["names"] == nlohmann::json({"layout:latest", "test/one:latest"}));
  CHECK(one["layers"].size() == 2);
  CHECK(one["config"]["env"] == nlohmann::json({"PATH=/bin:/usr/bin", "IMAGE_MARKER=one"}));
  CHECK(one["config"]["working_dir"] == "/kept");
  REQUIRE(root.nsbox({"image", "pull", "oci-archive:" + made.path() + "/o.tar:latest", "--name", "two"}).exit_code == 0);
  auto docker = root.nsbox({"image", "pull", "--json", "docker-archive:" + made.path() + "/d.tar"});
  INFO(docker.err);
  REQUIRE(docker.exit_code == 0);
  CHECK(TestRoot::json(docker)["names"] == nlohmann::json({"docker/img:v1"}));
  CHECK(TestRoot::json(docker)["manifest_digest"] == "");

  auto list = TestRoot::json(root.nsbox({"image", "ls", "--json"}))["images"];
  CHECK(list.size() == 3);
  // Three first layers of their own, and the second layer (the same in all three) once.
  CHECK(std::distance(fs::directory_iterator(root.path() + "/data/images/layers"), fs::directory_iterator()) == 4);
  CHECK(std::distance(fs::directory_iterator(root.path() + "/data/images/staging"), fs::directory_iterator()) == 0);

  // The merged tree: the upper layer's whiteouts applied, files linked from the layers.
  auto info = TestRoot::json(root.nsbox({"image", "inspect", "test/one"}));
  std::string tree = info["tree"].get<std::string>();
  CHECK(!fs::exists(tree + "/gone.txt"));
  CHECK(!fs::exists(tree + "/opaque/old.txt"));
  CHECK(nsbox::files::read_file(tree + "/opaque/new.txt").value_or("") == "after the opaque marker\n");
  CHECK(fs::exists(tree + "/kept/a.txt"));
  CHECK(fs::exists(tree + "/kept/b.txt"));
  // A read-only directory of a lower layer (0555) still takes the upper layer's names;
  // directories keep u+rwx in the store (their owner fills them).
  CHECK(fs::exists(tree + "/ro/old.txt"));
  CHECK(fs::exists(tree + "/ro/new.txt"));
  CHECK((lstat_of(tree + "/ro").st_mode & 07777) == 0755);
  CHECK(!fs::exists(tree + "/.wh.gone.txt"));
  CHECK(nsbox::files::read_file(tree + "/etc/os-release").value_or("").find("MARKER=one") != std::string::npos);
  // Hostile bits dealt with: no setuid, no device node, links kept as links.
  CHECK((lstat_of(tree + "/bin/su-ish").st_mode & (S_ISUID | S_ISGID)) == 0);
  CHECK(!fs::exists(tree + "/dev/null"));
  CHECK(fs::read_symlink(tree + "/etc/abs-link") == "/etc/os-release");
  CHECK(lstat_of(tree + "/bin/hello-link").st_ino == lstat_of(tree + "/bin/hello").st_ino);
  // Owned by the sandbox user's host id, never root; the tree's file is the layer's.
  CHECK(lstat_of(tree + "/etc/os-release").st_uid != 0);
  std::string first_layer = root.path() + "/data/images/layers/" + info["layers"][0]["diff_id"].get<std::string>().substr(7);
  CHECK(lstat_of(first_layer + "/etc/os-release").st_ino == lstat_of(tree + "/etc/os-release").st_ino);

  // Names, ids and digests all find it.
  CHECK(TestRoot::json(root.nsbox({"image", "inspect", "test/one:latest"}))["id"] == info["id"]);
  CHECK(TestRoot::json(root.nsbox({"image", "inspect", info["id"].get<std::string>().substr(7, 12)}))["id"] == info["id"]);
  CHECK(TestRoot::json(root.nsbox({"image", "inspect", info["manifest_digest"].get<std::string>()}))["id"] == info["id"]);
  auto missing = root.nsbox({"image", "inspect", "nope"});
  CHECK(missing.exit_code != 0);
  CHECK(missing.err.find("no image 'nope' here") != std::string::npos);

  // Removal keeps the shared layer while an image has it, and takes all at the end.
  REQUIRE(root.nsbox({"image", "rm", "test/one", "two"}).exit_code == 0);
  CHECK(std::distance(fs::directory_iterator(root.path() + "/data/images/layers"), fs::directory_iterator()) == 2);
  CHECK(!fs::exists(tree));
  REQUIRE(root.nsbox({"image", "rm", "docker/img:v1"}).exit_code == 0);
  CHECK(store_contents(root.path()) == std::set<std::string>{root.path() + "/data/images/blobs", root.path() + "/data/images/blobs/sha256",
                                                             root.path() + "/data/images/layers", root.path() + "/data/images/trees",
                                                             root.path() + "/data/images/records", root.path() + "/data/images/staging"});
}

TEST_CASE("images: a tampered layer, config or manifest refuses the whole pull, and nothing of it is kept or listed", "[images]") {
  TempDir made("nsbox-images");
  TestRoot root;
  // One good image first: a failed pull must not touch what it shares with it either.
  make_image("oci", made.path() + "/good", {"--marker", "good"});
  REQUIRE(root.nsbox({"image", "pull", "oci:" + made.path() + "/good"}).exit_code == 0);
  const auto before = store_contents(root.path());
  struct Case {
    std::string format, tamper, said;
  };
  for (const Case& c : {Case{"oci", "layer", "layer 2 of 2 does not match its digest"},
                        Case{"oci", "config", "layer 2 of 2's uncompressed content does not match its digest"},
                        Case{"oci", "manifest", "the image manifest does not match its digest"},
                        Case{"docker-archive", "layer", "layer 2 of 2's uncompressed content does not match its digest"}}) {
    std::string out = made.path() + "/" + c.format + "-" + c.tamper + (c.format == "oci" ? "" : ".tar");
    make_image(c.format, out, {"--tamper", c.tamper, "--marker", c.format + c.tamper});
    auto r = root.nsbox({"image", "pull", (c.format == "oci" ? "oci:" : "docker-archive:") + out});
    INFO(c.format << " " << c.tamper << ": " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(c.said) != std::string::npos);
    CHECK(r.err.find("nothing of this pull was kept") != std::string::npos);
    CHECK(store_contents(root.path()) == before);
    CHECK(TestRoot::json(root.nsbox({"image", "ls", "--json"}))["images"].size() == 1);
  }
}

TEST_CASE("images: what is not an image is refused, naming what is wrong", "[images]") {
  TempDir made("nsbox-images");
  TestRoot root;
  auto r = root.nsbox({"image", "pull", "oci:" + made.path()});
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("index.json") != std::string::npos);
  r = root.nsbox({"image", "pull", "docker://localhost:5000/x:y"});
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("pulls from a registry are not built yet") != std::string::npos);
  make_image("oci", made.path() + "/l");
  r = root.nsbox({"image", "pull", "oci:" + made.path() + "/l:nope"});
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("the layout has no image 'nope'") != std::string::npos);
  r = root.nsbox({"image", "pull", "oci:" + made.path() + "/l", "--name", "Bad Name"});
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("has a character other than") != std::string::npos);
  // A name cannot stand for another image's id.
  r = root.nsbox({"image", "pull", "oci:" + made.path() + "/l", "--name", "0123456789abcdef"});
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("looks like an image id") != std::string::npos);
  CHECK(TestRoot::json(root.nsbox({"image", "ls", "--json"}))["images"].empty());
}

TEST_CASE("rootless: an ordinary user pulls an image, unpacked as itself", "[rootless][images]") {
  NSBOX_NEEDS(unprivileged_user_namespaces());
  auto user = rootless_user();
  REQUIRE(user);
  TempDir made("nsbox-images");
  make_image("docker-archive", made.path() + "/d.tar", {"--name", "mine:1"});
  REQUIRE(::chmod((made.path() + "/d.tar").c_str(), 0644) == 0);
  TestRoot root(user);
  auto r = root.nsbox({"image", "pull", "--json", "docker-archive:" + made.path() + "/d.tar"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::string tree = TestRoot::json(root.nsbox({"image", "inspect", "mine:1"}))["tree"].get<std::string>();
  CHECK(lstat_of(tree + "/etc/os-release").st_uid == user->uid);
  // A sandbox of it: the overlay mounted in the user's own namespace.
  if (pull_busybox_image(root, made, "bb")) {
    auto created = root.nsbox({"create", "--json", "--image", "bb"});
    INFO(created.err);
    REQUIRE(created.exit_code == 0);
    auto id = TestRoot::json(created)["id"].get<std::string>();
    CHECK(root.sh(id, "grep MARKER /etc/os-release; echo w > /etc/w && cat /etc/w").out == "MARKER=bb\nw\n");
    REQUIRE(root.nsbox({"rm", id}).exit_code == 0);
    REQUIRE(root.nsbox({"image", "rm", "bb"}).exit_code == 0);
  } else {
    announce_partial("no static busybox here: a rootless image sandbox was not made");
  }
  REQUIRE(root.nsbox({"image", "rm", "mine:1"}).exit_code == 0);
  CHECK(!fs::exists(tree));
}


TEST_CASE("images: a sandbox's root is its image's tree under a writable layer of its own, and the image never changes",
          "[images]") {
  TempDir made("nsbox-images");
  TestRoot root;
  if (!pull_busybox_image(root, made, "bb")) NSBOX_SKIP_FOR("none", "no static busybox here (Debian's busybox-static) to make an image with a shell");
  auto id = TestRoot::json(root.nsbox({"create", "--json", "--image", "bb"}))["id"].get<std::string>();
  auto info = TestRoot::json(root.nsbox({"inspect", "--json", id}));
  std::string image_id = info["image"].get<std::string>();
  CHECK(image_id.size() == 64);
  CHECK(info["image_env"] == nlohmann::json({"PATH=/bin:/usr/bin", "IMAGE_MARKER=bb"}));
  // The image's files and Env, nsbox's user; none of the host's system.
  auto r = root.sh(id, "grep MARKER /etc/os-release; id -un; echo $IMAGE_MARKER; ls /usr 2>/dev/null || echo no-usr; "
                       "grep -c imageuser /etc/passwd; grep '^user:' /etc/passwd | head -c 12");
  INFO(r.err);
  CHECK(r.out == "MARKER=bb\nuser\nbb\nno-usr\n0\nuser:x:1000:");
  // Writes land in its own layer: kept across stop and start, never in the image.
  std::string tree = root.path() + "/data/images/trees/" + image_id;
  ino_t before = lstat_of(tree + "/etc/os-release").st_ino;
  REQUIRE(root.sh(id, "echo mine > /etc/new && echo changed > /etc/os-release && rm /kept/a.txt").exit_code == 0);
  CHECK(!fs::exists(tree + "/etc/new"));
  CHECK(fs::exists(tree + "/kept/a.txt"));
  CHECK(lstat_of(tree + "/etc/os-release").st_ino == before);
  CHECK(nsbox::files::read_file(tree + "/etc/os-release").value_or("").find("MARKER=bb") != std::string::npos);
  REQUIRE(root.nsbox({"stop", id}).exit_code == 0);
  REQUIRE(root.nsbox({"start", id}).exit_code == 0);
  CHECK(root.sh(id, "cat /etc/new /etc/os-release; ls /kept").out == "mine\nchanged\nb.txt\n");
  // Another sandbox of the image starts from the image, not from the first one's layer.
  auto other = TestRoot::json(root.nsbox({"create", "--json", "--image", "bb"}))["id"].get<std::string>();
  CHECK(root.sh(other, "cat /etc/new 2>/dev/null || echo none; ls /kept").out == "none\na.txt\nb.txt\n");
  // Its layer is its own and hidden: the home shows an empty mask where it is.
  CHECK(root.sh(id, "ls -A /home/user/.nsbox-root | wc -l").out == "0\n");
  // Cells are refused, saying why; the image cannot go while a sandbox has it.
  auto cell = root.nsbox({"exec", id, "-c", "print(1)"});
  CHECK(cell.exit_code != 0);
  CHECK(cell.err.find("cells in a sandbox made from an image run in the image's own Python") != std::string::npos);
  // No accounts there yet: the sandbox user owns every image file.
  auto accounts = root.nsbox({"create", "--image", "bb", "--user", "alice"});
  CHECK(accounts.exit_code != 0);
  CHECK(accounts.err.find("cannot have accounts of its own yet") != std::string::npos);
  auto busy = root.nsbox({"image", "rm", "bb"});
  CHECK(busy.exit_code != 0);
  CHECK(busy.err.find("is the root of sandbox") != std::string::npos);
  REQUIRE(root.nsbox({"rm", id, other}).exit_code == 0);
  CHECK(root.nsbox({"image", "rm", "bb"}).exit_code == 0);
  CHECK(!fs::exists(tree));
}

TEST_CASE("images: an image's links where nsbox mounts are replaced in the sandbox's own layer, never followed to the host",
          "[images]") {
  if (!fs::exists("/bin/busybox")) NSBOX_SKIP_FOR("none", "no static busybox here (Debian's busybox-static) to make an image with a shell");
  TempDir made("nsbox-images");
  TestRoot root;
  // /opt, /run, /home, /tmp and /mnt are absolute links to /tmp/nsbox-hostile-image-NAME:
  // built before the pivot, a mount through one would land on the host's path (and the
  // image's own /opt/nsbox/nsbox-init could run as the sandbox's init).
  make_image("oci", made.path() + "/hostile", {"--busybox", "/bin/busybox", "--hostile-links"});
  REQUIRE(root.nsbox({"image", "pull", "oci:" + made.path() + "/hostile", "--name", "hostile"}).exit_code == 0);
  const std::string prefix = "/tmp/nsbox-hostile-image-";
  for (const char* name : {"opt", "run", "home", "tmp", "mnt"}) fs::remove_all(prefix + name);
  auto created = root.nsbox({"create", "--json", "--image", "hostile"});
  INFO(created.err);
  REQUIRE(created.exit_code == 0);
  auto id = TestRoot::json(created)["id"].get<std::string>();
  auto r = root.sh(id, "ls /opt/nsbox/nsbox-init && touch /tmp/t /mnt/files/f /home/user/h && pwd && cat /proc/1/cmdline | head -c 10");
  INFO(r.err);
  CHECK(r.out == "/opt/nsbox/nsbox-init\n/home/user\nnsbox-init");
  for (const char* name : {"opt", "run", "home", "tmp", "mnt"}) CHECK(!fs::exists(prefix + name));
  REQUIRE(root.nsbox({"rm", id}).exit_code == 0);
}
