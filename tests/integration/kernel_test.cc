// Stateful Python cells through `nsbox exec`: persistence, the watchdog, output, results,
// errors, helpers, and bad input. Every test drives a real sandbox and its kernel.
#include <catch2/catch.hpp>
#include <filesystem>
#include <thread>

#include "isolation/sys/files.h"
#include "runtime/protocol/frame.h"
#include "runtime/protocol/unix_socket.h"
#include "tests/support/host_features.h"
#include "tests/support/nsbox_cli.h"

using namespace nsbox::test;
using nlohmann::json;

namespace {

// The kernel's part of the supervisor's status (its state, queued_cells, running_cell),
// asked on the control socket: `nsbox inspect` does not show it.
json kernel_status(const TestRoot& root, const std::string& id) {
  auto c = nsbox::protocol::connect_unix(root.path() + "/run/sandboxes/" + id + "/control.sock");
  if (!c || !nsbox::protocol::send_frame(c->get(), json{{"op", "status"}})) return json::object();
  auto reply = nsbox::protocol::recv_frame(c->get(), 16 << 20);
  if (!reply || !reply->has_value()) return json::object();
  return (*reply)->message.value("kernel", json::object());
}

}  // namespace

TEST_CASE("globals, imports and objects persist from one cell to the next", "[zygote]") {
  TestRoot root;
  auto id = root.create();
  CHECK(root.cell(id, "import json\nrows = [{'a': 1}]\nclass Box: pass\nb = Box(); b.v = 7")["status"] == "ok");
  auto r = root.cell(id, "rows.append({'a': 2}); json.dumps(rows) + ' ' + str(b.v)");
  CHECK(r["status"] == "ok");
  CHECK(r["results"] == "'[{\"a\": 1}, {\"a\": 2}] 7'");
  CHECK(r["execution_count"] == 2);
  CHECK(r["state_lost"] == false);
  // `output` wins over the last expression; a string is shown as is.
  CHECK(root.cell(id, "output = 'the answer'\n41 + 1")["results"] == "the answer");
  CHECK(root.cell(id, "x = 1")["results"].is_null());
}

// --lazy-kernel: no interpreter until the first cell; commands run without one; a stop
// and start keeps the choice.
TEST_CASE("a lazy kernel starts at the first cell, and a stopped and started sandbox stays lazy", "[zygote]") {
  TestRoot root;
  auto id = root.create({"--lazy-kernel"});
  // Every process of the sandbox, by its command line: no nsbox-kernel among them.
  const std::string kernels = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^/opt/nsbox/nsbox-kernel' || true";
  CHECK(kernel_status(root, id)["state"] == "stopped");
  CHECK(root.sh(id, kernels).out == "0\n");
  CHECK(TestRoot::json(root.nsbox({"inspect", "--json", id}))["lazy_kernel"] == true);
  auto first = root.cell(id, "import os; seen = os.getpid(); 6 * 7");
  CHECK(first["status"] == "ok");
  CHECK(first["results"] == "42");
  CHECK(first["execution_count"] == 1);
  CHECK(first["state_lost"] == false);
  CHECK(root.sh(id, kernels).out == "1\n");
  CHECK(root.cell(id, "seen == os.getpid()")["results"] == "True");  // the same interpreter
  REQUIRE(root.nsbox({"stop", id}).exit_code == 0);
  REQUIRE(root.nsbox({"start", id}).exit_code == 0);
  CHECK(kernel_status(root, id)["state"] == "stopped");
  CHECK(root.sh(id, kernels).out == "0\n");
  CHECK(root.cell(id, "1 + 1")["results"] == "2");
  // The default is unchanged: the kernel starts with the sandbox.
  auto eager = root.create();
  CHECK(TestRoot::json(root.nsbox({"inspect", "--json", eager}))["lazy_kernel"] == false);
  CHECK(kernel_status(root, eager)["state"] != "stopped");
}

TEST_CASE("a cell past its deadline is interrupted and keeps its globals", "[zygote]") {
  TestRoot root;
  auto id = root.create();
  root.cell(id, "kept = 'yes'");
  auto r = root.cell(id, "import time\nprogress = 0\nwhile True:\n    progress += 1\n    time.sleep(0.01)", {"--timeout", "1"});
  CHECK(r["status"] == "timeout");
  CHECK(r["state_lost"] == false);
  CHECK(r["error"]["ename"] == "KeyboardInterrupt");
  CHECK(r["message"].get<std::string>().find("deadline of 1 s") != std::string::npos);
  auto after = root.cell(id, "kept, progress > 10");
  CHECK(after["results"] == "('yes', True)");
}

TEST_CASE("a cell that ignores the interrupt is killed, a fresh kernel starts, and the next cell runs at once", "[zygote]") {
  TestRoot root;
  auto id = root.create();
  root.cell(id, "lost = 'soon'");
  root.cell(id, "open('/tmp/survives', 'w').write('tmp'); open('/mnt/files/survives', 'w').write('files')");
  // sum() over a huge range is one C call that never checks for signals.
  auto r = root.cell(id, "sum(range(10**13))", {"--timeout", "1"});
  CHECK(r["status"] == "timeout");
  CHECK(r["state_lost"] == true);
  CHECK(r["message"].get<std::string>().find("kernel was restarted") != std::string::npos);
  auto next = root.cell(id, "'lost' in globals(), open('/tmp/survives').read(), open('/mnt/files/survives').read()");
  CHECK(next["status"] == "ok");
  CHECK(next["results"] == "(False, 'tmp', 'files')");
  CHECK(next["execution_count"] == 1);  // a new interpreter
}

TEST_CASE("a cell that exhausts memory is reported as OOM, and the sandbox lives on", "[zygote]") {
  NSBOX_NEEDS(cgroup_limits());
  TestRoot root;
  auto id = root.create();
  auto r = root.cell(id, "b = bytearray(2 << 30); b[::4096] = b'x' * len(b[::4096])");
  CHECK(r["status"] == "killed");
  CHECK(r["reason"] == "oom");
  CHECK(r["state_lost"] == true);
  CHECK(r["message"].get<std::string>().find("memory limit is 1 GiB (size standard)") != std::string::npos);
  CHECK(root.cell(id, "1 + 1")["results"] == "2");
}

TEST_CASE("output from print, C-level writes and subprocesses lands in the cell in order", "[zygote]") {
  TestRoot root;
  auto id = root.create();
  auto r = root.cell(id,
                "import os, subprocess, ctypes, sys\n"
                "print('1 print')\n"
                "os.write(1, b'2 fd write\\n')\n"
                "ctypes.CDLL(None).puts(b'3 C puts'); ctypes.CDLL(None).fflush(None)\n"
                "subprocess.run(['echo', '4 subprocess'])\n"
                "os.system('echo 5 os.system')\n"
                "print('6 to stderr', file=sys.stderr)\n"
                "print('7 print')");
  CHECK(r["stdout"] == "1 print\n2 fd write\n3 C puts\n4 subprocess\n5 os.system\n7 print\n");
  CHECK(r["stderr"] == "6 to stderr\n");
  CHECK(r["stdout_lines"] == 6);
}

TEST_CASE("long output is cut in the result, and the whole text is in /mnt/files/.nsbox/output", "[zygote]") {
  TestRoot root;
  auto id = root.create();
  auto r = root.cell(id, "for i in range(20000): print(f'line {i:05d}')");
  CHECK(r["stdout_truncated"] == true);
  CHECK(r["stdout_bytes"] == 20000 * 11);
  CHECK(r["stdout_lines"] == 20000);
  CHECK(r["stdout"].get<std::string>().size() == 64u << 10);
  std::string path = r["stdout_file_path"].get<std::string>();
  CHECK(path.rfind("/mnt/files/.nsbox/output/", 0) == 0);
  auto whole = root.download(id, path);
  CHECK(whole.size() == 20000 * 11);
  CHECK(whole.substr(whole.size() - 11) == "line 19999\n");
  // The limit is the caller's to choose, for the result too.
  auto small = root.cell(id, "print('x' * 100); 'y' * 5000", {"--output-limit", "50"});
  CHECK(small["stdout"] == std::string(50, 'x'));
  CHECK(small["results"].get<std::string>().size() == 50);
  CHECK(small.contains("results_file_path"));
}

TEST_CASE("a cell printing a gigabyte does not take the supervisor's memory with it", "[zygote]") {
  TestRoot root;
  auto id = root.create({"--size", "large"});
  auto info = TestRoot::json(root.nsbox({"inspect", "--json", id}));
  auto r = root.cell(id, "import sys\nchunk = 'z' * (1 << 20)\nfor _ in range(1024): sys.stdout.write(chunk)", {"--timeout", "120"});
  CHECK(r["status"] == "ok");
  CHECK(r["stdout_bytes"] == 1ull << 30);
  auto status = nsbox::files::read_file("/proc/" + std::to_string(info["supervisor_pid"].get<int>()) + "/status");
  REQUIRE(status);
  auto rss = status->substr(status->find("VmHWM:") + 6);
  CHECK(std::stoull(rss) * 1024 < host_memory_bound(64u << 20));  // peak RSS: far from a gigabyte
}

TEST_CASE("a matplotlib figure becomes a PNG display item, headless", "[zygote]") {
  TestRoot root;
  auto id = root.create();
  auto r = root.cell(id, "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()\nplt.figure(); plt.bar([1], [2])");
  REQUIRE(r["display"].size() == 2);
  for (const auto& item : r["display"]) {
    CHECK(item["type"] == "image/png");
    std::string path = item["path"].get<std::string>();
    CHECK(root.download(id, path).substr(0, 8) == "\x89PNG\r\n\x1a\n");
  }
  // No "cannot show" warning. (On a slow machine — the TCG VM — matplotlib says once that
  // it builds its font cache: a note about time, not about showing.)
  std::string err = r["stderr"];
  const std::string font_cache = "Matplotlib is building the font cache; this may take a moment.\n";
  if (err.starts_with(font_cache)) err = err.substr(font_cache.size());
  CHECK(err == "");
}

TEST_CASE("input() fails at once with a clear error, and tracebacks point at the cell's lines", "[zygote]") {
  TestRoot root;
  auto id = root.create();
  auto r = root.cell(id, "name = input('name? ')");
  CHECK(r["status"] == "error");
  CHECK(r["error"]["ename"] == "EOFError");
  CHECK(r["error"]["evalue"].get<std::string>().find("input() is not available") != std::string::npos);
  auto tb = root.cell(id, "def f(x):\n    return 1 / x\n\nf(0)");
  CHECK(tb["error"]["ename"] == "ZeroDivisionError");
  std::string text = tb["error"]["traceback"].get<std::string>();
  CHECK(text.find("File \"<cell-2>\", line 4, in <module>") != std::string::npos);
  CHECK(text.find("File \"<cell-2>\", line 2, in f") != std::string::npos);
  CHECK(text.find("return 1 / x") != std::string::npos);
  CHECK(text.find("nsbox_kernel") == std::string::npos);  // none of the kernel's own frames
}

TEST_CASE("a top-level return says to end the cell with an expression or output", "[zygote]") {
  TestRoot root;
  auto id = root.create();
  auto r = root.cell(id, "x = 5\nreturn x");
  CHECK(r["status"] == "error");
  CHECK(r["error"]["ename"] == "SyntaxError");
  CHECK(r["error"]["evalue"].get<std::string>().find("end it with an expression, or assign the result to `output`") != std::string::npos);
}

TEST_CASE("without a tool backend the helpers answer from ten threads at once that none is configured, and progress streams", "[zygote]") {
  TestRoot root;
  auto id = root.create();
  auto r = root.cell(id,
                "from concurrent.futures import ThreadPoolExecutor\n"
                "with ThreadPoolExecutor(10) as pool:\n"
                "    got = list(pool.map(lambda i: run_composio_tool('GITHUB_STAR', {'i': i}), range(10)))\n"
                "llm = invoke_llm('hello')\n"
                "len(got), all(res is None and 'configured' in err for res, err in got + [llm])");
  CHECK(r["results"] == "(10, True)");
  auto streamed = root.nsbox({"exec", id, "-c", "set_progress('FETCHING_EMAILS', '10/100 emails'); print('done')"});
  CHECK(streamed.out == "done\n");
  CHECK(streamed.err.find("[FETCHING_EMAILS] 10/100 emails") != std::string::npos);
}

TEST_CASE("bad cells get a defined result and the kernel stays usable", "[zygote]") {
  TestRoot root;
  auto id = root.create();
  auto syntax = root.cell(id, "def (:");
  CHECK(syntax["status"] == "error");
  CHECK(syntax["error"]["ename"] == "SyntaxError");
  CHECK(root.cell(id, "")["status"] == "ok");
  // Binary garbage, from a file.
  std::string garbage_file = root.path() + "/garbage";
  REQUIRE(nsbox::files::atomic_write(garbage_file, std::string("\xff\xfe\x00\x01 print(1)\x80", 12)));
  auto garbage = TestRoot::json(root.nsbox({"exec", "--json", id, "-f", garbage_file}));
  CHECK(garbage["status"] == "error");
  CHECK(garbage["error"]["ename"] == "SyntaxError");
  // A 10 MiB cell.
  std::string big_file = root.path() + "/big.py";
  REQUIRE(nsbox::files::atomic_write(big_file, "s = '" + std::string(10u << 20, 'q') + "'\nlen(s)\n"));
  auto big = TestRoot::json(root.nsbox({"exec", "--json", id, "-f", big_file}, {.timeout_s = 120}));
  CHECK(big["results"] == std::to_string(10u << 20));
  // Output that is not UTF-8 comes back as base64, byte-exact.
  auto raw = root.cell(id, "import os; os.write(1, b'\\xff\\xfe ok')");
  CHECK(raw["stdout_b64"] == "//4gb2s=");
  // SystemExit does not end the kernel.
  CHECK(root.cell(id, "import sys; sys.exit(3)")["error"]["ename"] == "SystemExit");
  CHECK(root.cell(id, "'still here'")["results"] == "'still here'");
  CHECK(root.nsbox({"exec", id}).exit_code == 125);  // no code given: nsbox's own failure
}

TEST_CASE("sys.executable is a real Python: subprocess, multiprocessing and pip work", "[zygote]") {
  TestRoot root;
  auto id = root.create();
  auto r = root.cell(id,
                "import sys, subprocess, multiprocessing\n"
                "child = subprocess.run([sys.executable, '-c', 'print(6 * 7)'], capture_output=True, text=True).stdout.strip()\n"
                "with multiprocessing.Pool(2) as pool: squares = pool.map(abs, [-1, -2, -3])\n"
                "pip = subprocess.run([sys.executable, '-m', 'pip', '--version'], capture_output=True, text=True).returncode\n"
                "sys.executable, child, squares, pip",
                {"--timeout", "60"});
  CHECK(r["results"] == "('/usr/bin/python3.11', '42', [1, 2, 3], 0)");
}

TEST_CASE("Debian's data packages import in a cell", "[zygote]") {
  TestRoot root;
  auto id = root.create({"--size", "medium"});
  auto r = root.cell(id,
                "import numpy, pandas, matplotlib, PIL, reportlab\n"
                "df = pandas.DataFrame({'q': [1, 2], 'p': [3.0, 4.0]})\n"
                "float((df.q * df.p).sum()), int(numpy.arange(10).sum())",
                {"--timeout", "60"});
  CHECK(r["results"] == "(11.0, 45)");
}

TEST_CASE("cells queue in order and never interleave, interrupt stops the running one, restart gives a fresh kernel", "[zygote]") {
  TestRoot root;
  auto id = root.create();
  // Worker threads only run processes: Catch2's assertions are not thread-safe.
  auto exec_json = [&](const std::string& code) { return root.nsbox({"exec", "--json", id, "-c", code}, {.timeout_s = 120}); };
  // A runs until the test lets it go (bounded), which it does once B is queued behind A.
  ProcessResult first_run, second_run;
  std::thread a([&] {
    first_run = exec_json("import time, os\nprint('A', 0)\nopen('/tmp/a-running', 'w').close()\n"
                          "for _ in range(1200):\n    if os.path.exists('/tmp/a-may-end'): break\n    time.sleep(0.05)\n"
                          "for i in (1, 2):\n    print('A', i)\norder = ['A']");
  });
  bool a_running = root.wait_for_file(id, "/tmp/a-running");
  std::thread b;
  bool b_queued = false;
  if (a_running) {
    b = std::thread([&] { second_run = exec_json("print('B'); order.append('B'); order"); });
    for (int i = 0; i < 1200 && !b_queued; ++i) {
      b_queued = kernel_status(root, id).value("queued_cells", 0) == 1;
      if (!b_queued) std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
  }
  root.sh(id, "touch /tmp/a-may-end");
  a.join();
  if (b.joinable()) b.join();
  REQUIRE(a_running);
  REQUIRE(b_queued);
  json first = TestRoot::json(first_run), second = TestRoot::json(second_run);
  CHECK(first["stdout"] == "A 0\nA 1\nA 2\n");
  CHECK(second["stdout"] == "B\n");
  CHECK(second["results"] == "['A', 'B']");
  CHECK(second["cell"].get<int>() == first["cell"].get<int>() + 1);

  // Interrupted once it is sleeping (it says so first).
  ProcessResult interrupted_run;
  std::thread c([&] { interrupted_run = exec_json("import time; open('/tmp/c-sleeping', 'w').close(); time.sleep(60)"); });
  bool sleeping = root.wait_for_file(id, "/tmp/c-sleeping");
  auto interrupt = root.nsbox({"interrupt", id});
  c.join();
  REQUIRE(sleeping);
  CHECK(interrupt.exit_code == 0);
  json interrupted = TestRoot::json(interrupted_run);
  CHECK(interrupted["status"] == "interrupted");
  CHECK(interrupted["state_lost"] == false);
  CHECK(root.cell(id, "order")["results"] == "['A', 'B']");

  CHECK(root.nsbox({"restart", id}).exit_code == 0);
  auto fresh = root.cell(id, "'order' in globals()");
  CHECK(fresh["results"] == "False");
  CHECK(fresh["execution_count"] == 1);
}

TEST_CASE("sh reports line counts and keeps long output in a file too") {
  TestRoot root;
  auto id = root.create();
  auto r = TestRoot::json(root.nsbox({"sh", "--json", id, "--", "seq 1 30000"}));
  CHECK(r["exit_code"] == 0);
  CHECK(r["stdout_lines"] == 30000);
  CHECK(r["stdout_truncated"] == true);
  std::string path = r["stdout_file_path"].get<std::string>();
  auto whole = root.download(id, path);
  CHECK(whole.substr(whole.size() - 6) == "30000\n");
  auto human = root.nsbox({"sh", id, "--", "seq 1 30000 | tail -1"});
  CHECK(human.out == "30000\n");
}
