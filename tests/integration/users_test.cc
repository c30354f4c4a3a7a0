// Accounts of a sandbox's own (docs/semantics.md, "Users"): `create --user` or a
// manifest's "users" and "groups", and `run_as` (`--as`) on commands, processes and PTY
// sessions. Each account is an id of its own inside and on the host; none is root.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "isolation/userns.h"
#include "tests/support/nsbox_cli.h"
#include "tests/support/temp_dir.h"

using nsbox::test::TestRoot;

namespace {

std::string caps_of(const TestRoot& root, const std::string& id, const std::string& who, const std::string& pid) {
  return root
      .sh(id, "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/" + pid + "/status | tr -s '\\t' ' '",
          who.empty() ? std::vector<std::string>{} : std::vector<std::string>{"--as", who})
      .out;
}

const char* kNoCaps = "CapInh: 0000000000000000\nCapPrm: 0000000000000000\nCapEff: 0000000000000000\n"
                      "CapBnd: 0000000000000000\nCapAmb: 0000000000000000\nNoNewPrivs: 1\n";

}  // namespace

TEST_CASE("declared users run as themselves, with ids of their own inside and on the host, and cannot touch each other's files") {
  TestRoot root;
  auto id = root.create({"--user", "alice", "--user", "bob:1500", "--workspace-root", "/workspace", "--lazy-kernel"});
  auto record = TestRoot::json(root.nsbox({"inspect", "--json", id}));
  CHECK(record["users"] == nlohmann::json{{{"name", "alice"}, {"uid", 1001}}, {{"name", "bob"}, {"uid", 1500}}});

  CHECK(root.sh(id, "id -un; id -u; id -G; echo $USER $HOME $PYTHONUSERBASE; pwd", {"--as", "alice"}).out ==
        "alice\n1001\n1001\nalice /home/alice /home/alice/.local\n/workspace\n");
  CHECK(root.sh(id, "id -un; id -u", {"--as", "bob"}).out == "bob\n1500\n");
  CHECK(root.sh(id, "id -un; id -u; echo $HOME").out == "user\n1000\n/home/user\n");
  CHECK(root.sh(id, "grep -E '^(nsbox|alice|bob):' /etc/passwd").out ==
        "nsbox:x:999:999:nsbox init:/nonexistent:/usr/sbin/nologin\n"
        "alice:x:1001:1001:nsbox sandbox user:/home/alice:/bin/bash\nbob:x:1500:1500:nsbox sandbox user:/home/bob:/bin/bash\n");

  // The workspace, /tmp and /dev/shm are shared as /tmp is, and owned by nsbox (999), so
  // that user, as their owner, could not remove what the others made there.
  CHECK(root.sh(id, "stat -c '%a %U' /workspace /tmp /dev/shm /home/user /home/alice").out ==
        "1777 nsbox\n1777 nsbox\n1777 nsbox\n755 user\n700 alice\n");
  REQUIRE(root.sh(id, "echo mine > a.txt && echo private > secret && chmod 600 secret && echo t > /tmp/alices",
                  {"--as", "alice"}).exit_code == 0);
  auto bob = root.sh(id, "echo theirs >> a.txt; rm -f a.txt; cat secret; echo done", {"--as", "bob"});
  CHECK(bob.out == "done\n");
  CHECK(bob.err.find("a.txt: Permission denied") != std::string::npos);
  CHECK(bob.err.find("cannot remove 'a.txt': Operation not permitted") != std::string::npos);
  CHECK(bob.err.find("secret: Permission denied") != std::string::npos);
  // user is no one's superuser: it cannot read, remove or replace alice's files either.
  auto user = root.sh(id, "cat secret; rm -f a.txt /tmp/alices; mv a.txt b.txt; echo done");
  CHECK(user.out == "done\n");
  CHECK(user.err.find("secret: Permission denied") != std::string::npos);
  CHECK(user.err.find("cannot remove 'a.txt': Operation not permitted") != std::string::npos);
  CHECK(user.err.find("cannot remove '/tmp/alices': Operation not permitted") != std::string::npos);
  CHECK(root.sh(id, "cat a.txt /tmp/alices; stat -c '%U %a' a.txt secret").out == "mine\nt\nalice 644\nalice 600\n");

  // Nobody can plant what another's shell or Python would run: each home is its own.
  auto planted = root.sh(id, "echo 'echo owned' > /home/alice/.bashrc; echo 'echo owned' > /home/user/.bashrc; "
                             "touch /home/user/.local/x.pth; echo done",
                         {"--as", "bob"});
  CHECK(planted.out == "done\n");
  CHECK(planted.err.find("/home/alice/.bashrc: Permission denied") != std::string::npos);
  CHECK(planted.err.find("/home/user/.bashrc: Permission denied") != std::string::npos);
  CHECK(planted.err.find("/home/user/.local/x.pth") != std::string::npos);

  // On the host, alice's files belong to an id of her own beside the sandbox user's.
  auto pid = std::to_string(TestRoot::json(root.nsbox({"inspect", "--json", id}))["init_pid"].get<int>());
  struct stat st{};
  REQUIRE(::stat(("/proc/" + pid + "/root/workspace/a.txt").c_str(), &st) == 0);
  CHECK(st.st_uid == nsbox::userns::kRootModeHostId + 1);
  CHECK(st.st_gid == nsbox::userns::kRootModeHostId + 1);

  // Init runs as nsbox and keeps what switching ids needs (setuid, setgid, kill: 0xe0),
  // never ambient; every command, whoever it runs as, has no capability at all; and no
  // account can lower init's limits, which every later command would inherit.
  CHECK(root.sh(id, "ps -o user= -p 1").out == "nsbox\n");
  CHECK(caps_of(root, id, "", "1") == "CapInh: 00000000000000e0\nCapPrm: 00000000000000e0\nCapEff: 00000000000000e0\n"
                                       "CapBnd: 0000000000000000\nCapAmb: 0000000000000000\nNoNewPrivs: 1\n");
  CHECK(caps_of(root, id, "", "self") == kNoCaps);
  CHECK(caps_of(root, id, "alice", "self") == kNoCaps);
  auto lowered = root.sh(id, "prlimit --pid 1 --nofile=8:8");
  CHECK(lowered.exit_code != 0);
  CHECK(lowered.err.find("Operation not permitted") != std::string::npos);
  CHECK(root.sh(id, "true", {"--as", "alice"}).exit_code == 0);

  // Accounts and their files outlive a stop (their homes, tmpfs, do not).
  REQUIRE(root.nsbox({"stop", id}).exit_code == 0);
  REQUIRE(root.nsbox({"start", id}).exit_code == 0);
  CHECK(root.sh(id, "id -un; stat -c %U a.txt; ls -A ~", {"--as", "alice"}).out == "alice\nalice\n");
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}

TEST_CASE("with the workspace root in /home/user, user's home, the accounts get no share of it") {
  TestRoot root;
  auto id = root.create({"--user", "alice", "--lazy-kernel"});
  CHECK(root.sh(id, "stat -c '%a %U' /home/user").out == "755 user\n");
  auto alice = root.sh(id, "pwd; touch /home/user/x || echo refused; touch ~/mine && echo home", {"--as", "alice"});
  CHECK(alice.out == "/home/user\nrefused\nhome\n");
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}

TEST_CASE("a user's processes are started, listed, signalled and timed out like user's") {
  TestRoot root;
  auto id = root.create({"--user", "alice", "--user", "bob", "--lazy-kernel"});
  // The deadline's kill reaches another account's process group (init holds CAP_KILL).
  auto timed = root.sh(id, "sleep 60", {"--as", "alice", "--timeout", "1"});
  CHECK(timed.exit_code == 124);
  auto started = root.nsbox({"spawn", id, "--as", "bob", "--", "sleep", "600"});
  REQUIRE(started.exit_code == 0);
  std::string spawned = started.out.substr(0, started.out.find('\n'));
  auto ps = TestRoot::json(root.nsbox({"ps", "--json", id}));
  REQUIRE(ps["processes"].size() == 1);
  CHECK(ps["processes"][0]["run_as"] == "bob");
  CHECK(root.sh(id, "ps -o user= -p " + spawned).out == "bob\n");
  // Another account may not signal it; nsbox may.
  auto alice = root.sh(id, "kill " + spawned, {"--as", "alice"});
  CHECK(alice.err.find("Operation not permitted") != std::string::npos);
  CHECK(root.nsbox({"kill", id, spawned}).exit_code == 0);
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}

TEST_CASE("a manifest declares users and groups: members get the group, and run_as names only declared accounts") {
  TestRoot root;
  nsbox::test::TempDir dir;
  {
    std::ofstream(dir.path() + "/manifest.json")
        << R"({"version": 1, "root": "/workspace", "users": [{"name": "alice"}],
              "groups": [{"name": "team", "users": [{"name": "alice"}, {"name": "user"}, {"name": "carol"}]}],
              "entries": {"shared": {"type": "dir"}}})";
  }
  auto id = root.create({"--manifest", dir.path() + "/manifest.json", "--lazy-kernel"});
  CHECK(root.sh(id, "id -Gn; pwd; stat -c %a .", {"--as", "alice"}).out == "alice team\n/workspace\n1777\n");
  CHECK(root.sh(id, "id -Gn", {"--as", "carol"}).out == "carol team\n");
  CHECK(root.sh(id, "id -Gn").out == "user team\n");
  auto unknown = root.sh(id, "true", {"--as", "mallory"});
  CHECK(unknown.exit_code != 0);
  CHECK(unknown.err.find("no user \"mallory\" in this sandbox (it has user, alice, carol)") != std::string::npos);
  for (const char* bad : {"root", "0", "-"}) {
    INFO(bad);
    CHECK(root.sh(id, "true", {"--as", bad}).exit_code != 0);
  }
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}

TEST_CASE("a sandbox with no users keeps one id and an init without any capability") {
  TestRoot root;
  auto id = root.create({"--lazy-kernel"});
  CHECK(caps_of(root, id, "", "1") == kNoCaps);
  CHECK(root.sh(id, "stat -c %a /home/user").out != "1777\n");
  auto refused = root.sh(id, "true", {"--as", "alice"});
  CHECK(refused.exit_code != 0);
  CHECK(refused.err.find("no user \"alice\" in this sandbox (it has user)") != std::string::npos);
  CHECK(root.sh(id, "id -un", {"--as", "user"}).out == "user\n");
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}

TEST_CASE("bad account declarations are refused at create, naming the rule, and nothing is made") {
  TestRoot root;
  const std::pair<std::vector<std::string>, const char*> bad[] = {
      {{"--user", "root"}, "one of the sandbox's own accounts"},
      {{"--user", "alice:0"}, "must be a number from 1001"},
      {{"--user", "alice:1000"}, "must be a number from 1001"},
      {{"--user", "alice:x"}, "the id after ':' must be a number"},
      {{"--user", "Alice"}, "is not an account name"},
      {{"--user", "a:1500", "--user", "b:1500"}, "is another account's"},
  };
  for (const auto& [flags, why] : bad) {
    std::vector<std::string> args = {"create"};
    args.insert(args.end(), flags.begin(), flags.end());
    auto r = root.nsbox(args);
    INFO(r.err);
    CHECK(r.exit_code != 0);
    CHECK(r.err.find(why) != std::string::npos);
  }
  CHECK(TestRoot::json(root.nsbox({"ls", "--json"}))["sandboxes"].empty());
}
