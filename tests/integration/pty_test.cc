// PTY sessions (docs/semantics.md, "PTY sessions") through the command line: a terminal
// of the sandbox's own, typed into and read in windows; each a process named by its pid;
// Ctrl-C reaches the foreground process group; bounded in number; stop ends them all.
#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "tests/support/nsbox_cli.h"

using namespace nsbox::test;
using nlohmann::json;

namespace {

std::string start_session(const TestRoot& root, const std::string& id, const std::vector<std::string>& command,
                          const std::vector<std::string>& flags = {}) {
  return root.start_command({"pty", id, "start"}, flags, command);
}

json write(const TestRoot& root, const std::string& id, const std::string& sid, const std::string& chars, int yield_ms = 1000) {
  auto r = root.nsbox({"pty", id, "write", "--json", sid, chars, "--yield-ms", std::to_string(yield_ms)});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return TestRoot::json(r);
}

// Reads until `text` appeared or `rounds` windows passed (each bounded): output comes when
// the terminal has it, not on a schedule.
std::string read_until(const TestRoot& root, const std::string& id, const std::string& sid, const std::string& text, int rounds = 20) {
  std::string seen;
  for (int i = 0; i < rounds && seen.find(text) == std::string::npos; ++i) {
    auto r = root.nsbox({"pty", id, "read", "--json", sid, "--yield-ms", "500"});
    if (r.exit_code != 0) break;
    seen += TestRoot::json(r).value("output", "");
  }
  return seen;
}

}  // namespace

TEST_CASE("a PTY session echoes what is typed, is a terminal of the given size, and reports its exit", "[pty]") {
  TestRoot root;
  auto id = root.create();
  auto sid = start_session(root, id, {"bash", "--norc", "--noprofile"}, {"--cols", "100", "--rows", "30"});
  // A session is a process with a terminal: its id is its pid in the sandbox.
  auto listed = TestRoot::json(root.nsbox({"ps", "--json", id}))["processes"];
  REQUIRE(listed.size() == 1);
  CHECK(std::to_string(listed[0]["pid"].get<int>()) == sid);
  CHECK(listed[0]["tty"] == true);
  CHECK(root.sh(id, "ps -o args= -p " + sid).out == "bash --norc --noprofile\n");
  auto out = write(root, id, sid, "echo round-$((20+1)); tty; stty size\n");
  std::string text = out["output"].get<std::string>() + read_until(root, id, sid, "30 100", 5);
  CHECK(text.find("round-21") != std::string::npos);
  CHECK(text.find("/dev/pts/") != std::string::npos);
  CHECK(text.find("30 100") != std::string::npos);
  CHECK(out["exit_code"].is_null());

  REQUIRE(root.nsbox({"pty", id, "resize", sid, "--cols", "120", "--rows", "40"}).exit_code == 0);
  // The write's own window may hold the answer already: keep it.
  std::string resized = write(root, id, sid, "stty size\n", 0)["output"].get<std::string>();
  if (resized.find("40 120") == std::string::npos) resized += read_until(root, id, sid, "40 120");
  CHECK(resized.find("40 120") != std::string::npos);

  auto ended = write(root, id, sid, "exit 7\n", 5000);
  std::string tail = ended["output"];
  for (int i = 0; i < 10 && ended["exit_code"].is_null(); ++i) ended = write(root, id, sid, "", 1000);  // bounded
  CHECK(ended["exit_code"] == 7);
  // Read to the end, the session is gone.
  auto gone = root.nsbox({"pty", id, "read", sid});
  CHECK(gone.exit_code != 0);
  CHECK(gone.err.find("no PTY session " + sid) != std::string::npos);
  CHECK(TestRoot::json(root.nsbox({"ps", "--json", id}))["processes"].empty());  // and so is its process
}

TEST_CASE("Ctrl-C reaches the foreground process group: sleep dies under a parent that ignores SIGINT", "[pty]") {
  TestRoot root;
  auto id = root.create();
  auto sid = start_session(root, id, {"bash", "--norc", "--noprofile"});
  write(root, id, sid,
        "python3 -c \"import signal, subprocess; signal.signal(signal.SIGINT, signal.SIG_IGN); "
        "r = subprocess.run(['sleep', '30'], preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)); "
        "print('sleep ended by', -r.returncode)\"\n",
        500);
  CHECK(root.sh(id, "pgrep -x sleep > /dev/null && echo sleeping").out == "sleeping\n");
  auto after = write(root, id, sid, "\x03", 1000);
  std::string text = after["output"].get<std::string>() + read_until(root, id, sid, "sleep ended by 2", 10);
  CHECK(text.find("sleep ended by 2") != std::string::npos);  // SIGINT is 2; the parent lived to say so
  CHECK(root.sh(id, "pgrep -x sleep || echo none").out == "none\n");
}

TEST_CASE("PTY sessions are bounded: the 65th prunes the least recently used but never the 8 newest, and kill and stop end them", "[pty]") {
  TestRoot root;
  auto id = root.create();
  std::vector<std::string> sids;
  for (int i = 1; i <= 64; ++i) sids.push_back(start_session(root, id, {"sleep", "1000"}));
  CHECK(std::set<std::string>(sids.begin(), sids.end()).size() == 64);
  CHECK(root.sh(id, "pgrep -c -x sleep").out == "64\n");
  REQUIRE(root.nsbox({"pty", id, "read", sids[0], "--yield-ms", "0"}).exit_code == 0);  // the first is used now
  auto newest = start_session(root, id, {"sleep", "1000"});
  CHECK(root.nsbox({"pty", id, "read", sids[0], "--yield-ms", "0"}).exit_code == 0);
  auto pruned = root.nsbox({"pty", id, "read", sids[1], "--yield-ms", "0"});
  CHECK(pruned.exit_code != 0);
  CHECK(pruned.err.find("no PTY session " + sids[1]) != std::string::npos);
  CHECK(root.sh(id, "pgrep -c -x sleep").out == "64\n");  // its process was killed

  auto unknown = root.nsbox({"pty", id, "write", "999999", "x"});
  CHECK(unknown.exit_code != 0);
  CHECK(unknown.err.find("no PTY session 999999") != std::string::npos);

  auto killed = TestRoot::json(root.nsbox({"pty", id, "kill", "--json", newest}));
  CHECK(killed["killed"] == json::array({std::stoi(newest)}));
  CHECK(root.sh(id, "pgrep -c -x sleep").out == "63\n");
  REQUIRE(root.nsbox({"stop", id}).exit_code == 0);
  REQUIRE(root.nsbox({"start", id}).exit_code == 0);
  CHECK(root.sh(id, "pgrep -c -x sleep || true").out == "0\n");
  CHECK(root.nsbox({"pty", id, "read", sids[0]}).err.find("no PTY session " + sids[0]) != std::string::npos);
  auto all = TestRoot::json(root.nsbox({"pty", id, "kill", "--json", "--all"}));
  CHECK(all["killed"].empty());
}

TEST_CASE("sh --tty is interactive: raw keys, the window's size followed (SIGWINCH), the command's exit status", "[pty]") {
  TestRoot root;
  auto id = root.create();
  // The test's own terminal: Python's pty module runs nsbox on one, types, resizes it.
  const std::string driver = R"(
import os, pty, select, struct, sys, time, fcntl, termios
nsbox, root, sandbox = sys.argv[1:4]
pid, fd = pty.fork()
if pid == 0:  # the first size is set before nsbox can read it: a new terminal's is 0x0
    fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 99, 0, 0))
    os.execv(nsbox, [nsbox, "--root", root, "sh", "--tty", sandbox, "--",
             "bash -c 'stty size; read x; stty size; echo got:$x; exit 5'"])
def size(rows, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
out = b""
def pump(until):
    global out
    end = time.time() + 30
    while until not in out and time.time() < end:
        if select.select([fd], [], [], 0.5)[0]:
            try:
                out += os.read(fd, 4096)
            except OSError:
                break
pump(b"33 99")
size(41, 120)  # the kernel sends nsbox SIGWINCH now, before the keys below: it is handled first
os.write(fd, b"hello\r")
pump(b"got:hello")
_, status = os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors="replace") + "\nexit %d\n" % os.waitstatus_to_exitcode(status))
)";
  auto r = run_process({"/usr/bin/python3.11", "-c", driver, nsbox_binary(), root.path(), id}, {.timeout_s = 90});
  INFO(r.out << r.err);
  CHECK(r.out.find("33 99") != std::string::npos);
  CHECK(r.out.find("41 120") != std::string::npos);
  CHECK(r.out.find("got:hello") != std::string::npos);
  CHECK(r.out.find("exit 5\n") != std::string::npos);
}

TEST_CASE("input a program does not read waits in a bounded queue and never holds up the supervisor", "[pty]") {
  TestRoot root;
  auto id = root.create();
  // Raw mode reads nothing: the terminal fills and stops taking input (a canonical one
  // would drop what does not fit instead).
  auto sid = start_session(root, id, {"bash", "-c", "stty raw -echo; exec sleep 1000"});
  // 100 KiB at a time (one argument of a command line holds at most 128 KiB).
  std::string paste(100 << 10, 'x');
  auto r = root.nsbox({"pty", id, "write", "--json", sid, paste, "--yield-ms", "0"}, {.timeout_s = 60});
  INFO(r.err);
  CHECK(r.exit_code == 0);  // answered at once: what the terminal cannot take waits
  CHECK(root.sh(id, "echo served").out == "served\n");
  ProcessResult over;
  for (int i = 0; i < 12; ++i) {  // past 1 MiB waiting, a write is refused
    over = root.nsbox({"pty", id, "write", sid, paste, "--yield-ms", "0"}, {.timeout_s = 60});
    if (over.exit_code != 0) break;
  }
  CHECK(over.exit_code != 0);
  CHECK(over.err.find("has not read") != std::string::npos);
  CHECK(TestRoot::json(root.nsbox({"pty", id, "kill", "--json", sid}))["killed"] == json::array({std::stoi(sid)}));
  CHECK(root.sh(id, "pgrep -x sleep || echo none").out == "none\n");
}
