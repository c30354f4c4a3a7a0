// Python packages in a sandbox (docs/network.md, "Packages"): a user site on /home/user,
// pip's sources from the host (a wheelhouse bound read-only, fully offline; a PEP 503
// index reached through the egress proxy), and auto-install of what a cell imports. The
// wheel is built by the test (tests/peers/tiny_wheel.py); the index is a static server
// on loopback reached by a test name. Nothing leaves the machine.
#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "tests/support/nsbox_cli.h"
#include "tests/support/temp_dir.h"

using namespace nsbox::test;
using nlohmann::json;

namespace {

// A directory with tinypkg's wheel and a simple index for it; `other` adds otherpkg.
class Wheelhouse {
 public:
  Wheelhouse() {
    for (const char* name : {"tinypkg", "otherpkg"}) {
      auto r = run_process({"/usr/bin/python3.11", std::string(NSBOX_SOURCE_DIR) + "/tests/peers/tiny_wheel.py", path(), "--name", name});
      REQUIRE(r.exit_code == 0);
    }
    // The sandbox user reads it through the bind (others' read access, as a shared wheelhouse has).
    for (const auto& e : std::filesystem::recursive_directory_iterator(path()))
      ::chmod(e.path().c_str(), e.is_directory() ? 0755 : 0644);
  }
  const std::string& path() const { return dir_.path(); }

 private:
  TempDir dir_{"nsbox-wheels"};
};

// The wheelhouse served over HTTP on loopback: a PEP 503 index at /simple/.
class Index {
 public:
  explicit Index(const std::string& dir)
      : process_({"/usr/bin/python3.11", "-u", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory", dir},
                 {.stdin_is_null = false}) {
    REQUIRE(process_.wait_for_output("port ", 30));
    std::string out = process_.output();
    port = std::stoi(out.substr(out.find("port ") + 5));
  }
  ~Index() {
    process_.signal(SIGTERM);
    (void)process_.wait(30);
  }
  int port = 0;

 private:
  BackgroundProcess process_;
};

ProcessOptions resolving() { return {.extra_env = {"NSBOX_TEST_RESOLVE=pypi.test=127.0.0.1"}}; }

std::string usr_fingerprint() {
  auto r = run_process({"sh", "-c", "find /usr/lib/python3/dist-packages /usr/local/lib -maxdepth 1 2>/dev/null | sort | md5sum"});
  return r.out;
}

}  // namespace

TEST_CASE("a cell's import installs a missing package from a wheelhouse, offline, and it survives a restart", "[packages][zygote]") {
  Wheelhouse wheels;
  std::string before = usr_fingerprint();
  TestRoot root;
  auto id = root.create({"--wheelhouse", wheels.path()});  // --net none: no network at all
  auto streamed = root.nsbox({"exec", id, "-c", "import tinypkg\nprint(tinypkg.VALUE, tinypkg.__file__)"});
  REQUIRE(streamed.exit_code == 0);
  CHECK(streamed.out == "42 /home/user/.local/lib/python3.11/site-packages/tinypkg/__init__.py\n");
  CHECK(streamed.err.find("[installing tinypkg]") != std::string::npos);  // the progress event
  // A script of the bash tool sees it too, and pip works there by hand.
  CHECK(root.sh(id, "python3 -c 'import tinypkg; print(tinypkg.NAME)'").out == "tinypkg\n");
  CHECK(root.sh(id, "python3 -m pip install -q otherpkg && python3 -c 'import otherpkg; print(otherpkg.VALUE)'").out == "42\n");
  // A fresh interpreter keeps what was installed: it is in /home/user.
  REQUIRE(root.nsbox({"restart", id}).exit_code == 0);
  CHECK(root.cell(id, "import tinypkg, otherpkg; tinypkg.VALUE + otherpkg.VALUE")["results"] == "84");
  CHECK(usr_fingerprint() == before);  // nothing installed on the host
  CHECK(root.sh(id, "touch /usr/lib/python3/dist-packages/x 2>&1; echo $?").out.find("Read-only file system") != std::string::npos);
}

TEST_CASE("auto-install through a package index reached by the proxy: only the index's host is allowed", "[packages][zygote]") {
  Wheelhouse wheels;
  Index index(wheels.path());
  TestRoot root;
  auto id = root.create({"--pip-index", "http://pypi.test:" + std::to_string(index.port) + "/simple", "--net-allow-private",
                         "pypi.test"},
                        resolving());
  auto info = TestRoot::json(root.nsbox({"inspect", "--json", id}));
  CHECK(info["net"]["allow"] == json::array({"pypi.test:" + std::to_string(index.port)}));
  CHECK(root.cell(id, "import tinypkg; tinypkg.VALUE")["results"] == "42");
  // The proxy lets nothing else out.
  auto other = root.sh(id, "curl -sS -o /dev/null -w '%{http_code}' http://example.test/ 2>/dev/null");
  CHECK(other.out == "403");
}

TEST_CASE("what may not be installed says why: a package off --packages-allow, no source, auto-install off, a library's import", "[packages][zygote]") {
  Wheelhouse wheels;
  TestRoot root;
  auto allowed = root.create({"--wheelhouse", wheels.path(), "--packages-allow", "tinypkg"});
  auto refused = root.cell(allowed, "import otherpkg");
  CHECK(refused["error"]["ename"] == "ModuleNotFoundError");
  CHECK(refused["error"]["evalue"].get<std::string>().find("not in this sandbox's --packages-allow (tinypkg)") != std::string::npos);
  CHECK(root.cell(allowed, "import tinypkg; tinypkg.VALUE")["results"] == "42");
  // A library probing for an optional module installs nothing.
  REQUIRE(root.sh(allowed, "mkdir -p /home/user/lib && printf 'try:\\n    import otherpkg\\nexcept ImportError:\\n    otherpkg = None\\n'"
                           " > /home/user/lib/probe.py").exit_code == 0);
  CHECK(root.cell(allowed, "import sys; sys.path.insert(0, '/home/user/lib'); import probe; probe.otherpkg is None")["results"] == "True");

  auto nosource = root.create();
  auto hint = root.cell(nosource, "import tinypkg");
  CHECK(hint["error"]["evalue"].get<std::string>().find("--pip-index URL or --wheelhouse DIR") != std::string::npos);

  auto off = root.create({"--wheelhouse", wheels.path(), "--auto-install", "off"});
  auto plain = root.cell(off, "import tinypkg");
  CHECK(plain["error"]["evalue"] == "No module named 'tinypkg'");
  CHECK(root.sh(off, "python3 -m pip install -q tinypkg && echo ok").out == "ok\n");  // by hand still works

  auto bad = root.nsbox({"create", "--pip-index", "ftp://x/simple"});
  CHECK(bad.exit_code != 0);
  CHECK(bad.err.find("not an http:// or https:// URL") != std::string::npos);
}
