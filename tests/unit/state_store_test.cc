#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <set>

#include "isolation/sys/files.h"
#include "runtime/core/state_store.h"

using namespace nsbox;

namespace {
struct TempRoot {
  std::string path;
  TempRoot() {
    char tmpl[] = "/tmp/nsbox-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempRoot() { std::filesystem::remove_all(path); }
};
}  // namespace

TEST_CASE("the --root option puts runtime and data state under one directory, and must be absolute") {
  auto r = StateRoot::resolve(std::string("/srv/x"));
  REQUIRE(r);
  CHECK(r->run_dir == "/srv/x/run");
  CHECK(r->data_dir == "/srv/x/data");
  CHECK(r->socket_path("sbx-a") == "/srv/x/run/sandboxes/sbx-a/control.sock");
  CHECK_FALSE(StateRoot::resolve(std::string("relative")));
}

TEST_CASE("ids are sbx- and 6 base36 characters, and differ") {
  StateStore store(StateRoot{"/x/run", "/x/data"});
  std::set<std::string> ids;
  for (int i = 0; i < 100; ++i) {
    auto id = store.new_id();
    CHECK(id.size() == 10);
    CHECK(id.rfind("sbx-", 0) == 0);
    ids.insert(id);
  }
  CHECK(ids.size() > 95);
}

TEST_CASE("names are validated, unique, and resolve to their sandbox") {
  TempRoot tmp;
  StateStore store(StateRoot{tmp.path + "/run", tmp.path + "/data"});
  REQUIRE(store.ensure_dirs());
  for (const std::string& bad : std::vector<std::string>{"", "-x", "a/b", "..", "UPPER", "sbx-abc", std::string(64, 'a')})
    CHECK_FALSE(StateStore::validate_name(bad));
  CHECK(StateStore::validate_name("etl-2.v1_x"));

  SandboxRecord rec;
  rec.id = "sbx-aaaaaa";
  rec.spec.name = "etl";
  REQUIRE(std::filesystem::create_directories(store.root().sandbox_dir(rec.id)));
  REQUIRE(store.save(rec));
  REQUIRE(store.reserve_name("etl", rec.id));
  auto dup = store.reserve_name("etl", "sbx-bbbbbb");
  REQUIRE_FALSE(dup);
  CHECK(dup.error().code == ErrorCode::kAlreadyExists);
  CHECK(*store.resolve("etl") == rec.id);
  CHECK(*store.resolve(rec.id) == rec.id);
  CHECK(store.resolve("nope").error().code == ErrorCode::kNotFound);
  CHECK(store.resolve("../etc").error().code == ErrorCode::kNotFound);

  // A name whose sandbox is gone is free again.
  std::filesystem::remove_all(store.root().sandbox_dir(rec.id));
  CHECK(store.reserve_name("etl", "sbx-cccccc"));
}

TEST_CASE("a record round-trips through JSON, and has no field an env value could go in") {
  SandboxRecord rec;
  rec.id = "sbx-abcdef";
  rec.spec.size = SizeTier::kXlarge;
  rec.spec.net = {network::Mode::kAllow, *net::AllowList::parse("pypi.org,*.example.com:8443,[::1]:9000", "pypi.org")};
  rec.facts.enforcement = Enforcement::kCgroupV1;
  rec.facts.cgroup = {"v1", {"/sys/fs/cgroup/memory/nsbox/sbx-abcdef"}, {"memory"}};
  rec.spec.env_names = {"API_KEY"};
  rec.facts.home = "sbx-abcdef";
  rec.facts.stopped_at = "2026-12-02T00:00:00Z";
  rec.facts.ports = {{8000, "127.0.0.1", 40123}};
  auto j = rec.to_json();
  // The state file is this JSON. Its fields are the ones below and no other: a new field
  // fails here until someone decides it can hold no secret (--env values, credentials).
  // That `nsbox create --env K=V` writes V nowhere is checked end to end in
  // tests/integration/lifecycle_test.cc. "tools" is ToolsConfig::to_json, which has no
  // field for a key (ToolKeys are apart: tests/unit/tools_config_test.cc).
  std::set<std::string> fields;
  for (const auto& [key, value] : j.items()) fields.insert(key);
  CHECK(fields == std::set<std::string>{"id", "name", "size", "net", "created_at", "supervisor_pid", "init_pid", "enforcement",
                                        "cgroup", "env_names", "volume", "home", "stopped_at", "mounts", "signed_mounts", "ephemeral", "manifest_digest", "mount_servers", "tools",
                                        "packages",
                                        // the warm pool's: a server's tag, "warm"/"cold", module names, a flag
                                        "pool", "create_path", "preload", "memory_merge", "lazy_kernel",
                                        // sizes, a snapshot's id or name and seconds, as asked at create
                                        "files_quota", "home_size", "from_snapshot", "ttl_s", "workspace_root",
                                        // accounts: names and ids
                                        "users", "groups",
                                        // an image's id and its own Env (from the image, never a create's env)
                                        "image", "image_env",
                                        // port forwards: port numbers and a loopback address
                                        "ports"});
  CHECK(j["env_names"] == nlohmann::json::array({"API_KEY"}));
  auto back = SandboxRecord::from_json(j);
  REQUIRE(back);
  CHECK(back->spec.size == SizeTier::kXlarge);
  REQUIRE(back->facts.ports.size() == 1);
  CHECK(back->facts.ports[0].host_port == 40123);
  CHECK(back->facts.ports[0].host == "127.0.0.1");
  CHECK(back->facts.home == "sbx-abcdef");
  CHECK(back->facts.stopped_at == "2026-12-02T00:00:00Z");
  CHECK(back->spec.net.mode == network::Mode::kAllow);
  CHECK(back->spec.net.to_json() == rec.spec.net.to_json());
  CHECK(back->spec.net.allow.match("files.example.com", 8443) != nullptr);
  CHECK(back->facts.cgroup.dirs == rec.facts.cgroup.dirs);
  CHECK(back->spec.env_names == rec.spec.env_names);
  CHECK(back->to_json() == j);
  CHECK_FALSE(SandboxRecord::from_json({{"id", "x"}}));
}

TEST_CASE("the sandbox lock tells a live supervisor from a dead one") {
  TempRoot tmp;
  StateStore store(StateRoot{tmp.path + "/run", tmp.path + "/data"});
  REQUIRE(store.ensure_dirs());
  REQUIRE(std::filesystem::create_directories(store.root().sandbox_dir("sbx-lockme")));
  CHECK_FALSE(store.supervisor_alive("sbx-lockme"));
  {
    auto lock = store.lock_sandbox("sbx-lockme");
    REQUIRE(lock);
    CHECK(store.supervisor_alive("sbx-lockme"));
    CHECK(store.lock_sandbox("sbx-lockme").error().code == ErrorCode::kBusy);
  }
  CHECK_FALSE(store.supervisor_alive("sbx-lockme"));
}

TEST_CASE("state directories must be ours alone: a symlink, a foreign or a shared one is refused") {
  TempRoot tmp;
  std::string mine = tmp.path + "/mine";
  REQUIRE(files::ensure_private_dir(mine));
  struct stat st{};
  REQUIRE(::stat(mine.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);

  std::string shared = tmp.path + "/shared";
  REQUIRE(::mkdir(shared.c_str(), 0777) == 0);
  REQUIRE(::chmod(shared.c_str(), 0777) == 0);
  auto r = files::ensure_private_dir(shared);
  REQUIRE_FALSE(r);
  CHECK(r.error().message == "refusing to keep state in " + shared + ": others may write to it");

  std::string foreign = tmp.path + "/foreign";
  REQUIRE(::mkdir(foreign.c_str(), 0700) == 0);
  REQUIRE(::chown(foreign.c_str(), 65534, 65534) == 0);
  CHECK(files::ensure_private_dir(foreign).error().message.find("belongs to uid 65534") != std::string::npos);

  std::string link = tmp.path + "/link";
  REQUIRE(::symlink(mine.c_str(), link.c_str()) == 0);
  CHECK(files::ensure_private_dir(link).error().message.find("symlink") != std::string::npos);
}
