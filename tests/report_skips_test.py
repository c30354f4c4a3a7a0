#!/usr/bin/python3.11
"""tests/report_skips against CTest logs made up here, with this build's `nsbox doctor`:
a skip for what doctor says this host has fails the run, as does a skip that names no
doctor check, and a "SKIP: " that is not at a line's start, or comes from a test that
failed, is no skip.

  tests/report_skips_test.py BUILD_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def log_of(tests):
    """CTest's LastTest.log for `tests`: (name, output lines, verdict)."""
    out = ["Start testing: Dec 06 08:00 UTC", "-" * 58]
    for i, (name, lines, verdict) in enumerate(tests, 1):
        out += ["%d/%d Testing: %s" % (i, len(tests), name), "%d/%d Test: %s" % (i, len(tests), name),
                'Command: "x"', "Directory: /", '"%s" start time: Dec 06 08:00 UTC' % name, "Output:", "-" * 58]
        out += lines
        out += ["<end of output>", "Test time =   0.01 sec", "-" * 58, "Test %s." % verdict,
                '"%s" end time: Dec 06 08:00 UTC' % name, '"%s" time elapsed: 00:00:00' % name, "-" * 58, ""]
    return "\n".join(out) + "\n"


def report(build, tests):
    with tempfile.TemporaryDirectory(prefix="nsbox-test-report-") as fake:
        os.makedirs(os.path.join(fake, "Testing", "Temporary"))
        os.makedirs(os.path.join(fake, "bin"))
        os.symlink(os.path.join(build, "bin", "nsbox"), os.path.join(fake, "bin", "nsbox"))
        with open(os.path.join(fake, "Testing", "Temporary", "LastTest.log"), "w") as f:
            f.write(log_of(tests))
        done = subprocess.run([os.path.join(HERE, "report_skips"), fake], capture_output=True, text=True, timeout=300)
        return done.returncode, done.stdout + done.stderr


def main():
    build = os.path.abspath(sys.argv[1])
    doctor = json.loads(subprocess.run([os.path.join(build, "bin", "nsbox"), "doctor", "--json"], capture_output=True,
                                       text=True, timeout=120).stdout)
    ok = [c["name"] for c in doctor["checks"] if c["level"] == "ok"]
    lacking = [c["name"] for c in doctor["checks"] if c["level"] != "ok"]
    failures = []

    def expect(what, tests, status, text=None):
        got, out = report(build, tests)
        if got != status or (text and text not in out):
            failures.append("%s: report_skips exited %d (expected %d)%s; it said:\n%s" %
                            (what, got, status, " without %r" % text if text else "", out))

    # A check doctor says ok: the skip hides a feature the host has.
    expect("a skip doctor contradicts", [("a", ["SKIP: needs it [doctor: %s]" % ok[0]], "Skipped")], 1,
           "but nsbox doctor says this host has it: " + ok[0])
    if doctor["mode"] == "root":
        expect("a skip for root, as root", [("a", ["SKIP: not root [doctor: root]"], "Skipped")], 1, "mode: root")
    expect("a skip that names no check", [("a", ["SKIP: no reason to give"], "Skipped")], 1, "must name the nsbox doctor check")
    expect("a check doctor does not have", [("a", ["SKIP: x [doctor: no such check]"], "Skipped")], 1, "could not tell")
    # Not skips: a marker inside a line, and one in a failed test's output.
    expect("a marker not at a line's start", [("a", ["said SKIP: x [doctor: %s]" % ok[0]], "Passed")], 0, "skipped tests: none")
    expect("a failed test's marker", [("a", ["SKIP: x [doctor: %s]" % ok[0]], "Failed")], 0, "skipped tests: none")
    # Honest skips pass, and are listed.
    expect("a need of the test's own", [("a", ["SKIP: ptrace is refused [doctor: none]"], "Skipped")], 0,
           "which nsbox doctor does not check: a (ptrace is refused)")
    if lacking:
        expect("a skip doctor agrees with", [("a", ["SKIP: lacks it [doctor: %s]" % lacking[0]], "Skipped")], 0,
               "skipped tests: 1: a (lacks it)")
    for f in failures:
        print("FAIL: " + f)
    print("report_skips: %d cases, %d failed" % (8, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
