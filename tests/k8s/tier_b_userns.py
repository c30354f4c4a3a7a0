#!/usr/bin/python3.11
"""Tier B's pod, emulated (docs/scale-out.md): nsbox as root in a user namespace that maps
65,536 ids (what `hostUsers: false` gives a pod) makes a sandbox, whose user maps to the
highest id of that namespace, and removes it, leaving nothing.

  tests/k8s/tier_b_userns.py NSBOX_BIN
"""
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile

CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000
OUTSIDE = 300000  # the pod's ids on the host: 300000..365535


def in_pod_namespace(nsbox: str, root: str, args: list) -> subprocess.CompletedProcess:
    """Runs `nsbox --root ROOT ARGS` as root of a fresh user namespace mapping 65,536 ids."""
    libc = ctypes.CDLL(None, use_errno=True)
    out = tempfile.TemporaryFile()
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(ready_r)
            os.close(go_w)
            if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
                os._exit(90)
            os.write(ready_w, b"x")
            if os.read(go_r, 1) != b"x":
                os._exit(91)
            os.setgid(0)
            os.setuid(0)
            os.dup2(out.fileno(), 1)
            os.dup2(out.fileno(), 2)
            os.execv(nsbox, [nsbox, "--root", root] + args)
        finally:
            os._exit(92)
    os.close(ready_w)
    os.close(go_r)
    try:
        if os.read(ready_r, 1) != b"x":
            raise AssertionError("the child could not unshare a user namespace")
        for name in ("uid_map", "gid_map"):
            with open("/proc/%d/%s" % (pid, name), "w") as f:
                f.write("0 %d 65536\n" % OUTSIDE)
        os.write(go_w, b"x")
    finally:
        os.close(go_w)
        os.close(ready_r)
    # Bounded: a sandbox's run takes seconds.
    for _ in range(1200):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        subprocess.run(["sleep", "0.1"])
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        raise AssertionError("nsbox in the pod's namespace did not end in 120 s")
    out.seek(0)
    return subprocess.CompletedProcess(args, os.waitstatus_to_exitcode(status), out.read().decode(), "")


def main() -> int:
    nsbox = sys.argv[1]
    if os.geteuid() != 0:
        print("SKIP: tier B emulation: needs root (to write a 65,536-id map)")
        return 0
    root = tempfile.mkdtemp(prefix="nsbox-test-tierb-", dir="/tmp")
    try:
        os.chmod(root, 0o755)
        os.chown(root, OUTSIDE, OUTSIDE)  # the pod's root owns its volume
        ran = in_pod_namespace(nsbox, root, ["run", "--", "sh", "-c", "id -u; cat /proc/self/uid_map; echo ok > /tmp/x && cat /tmp/x"])
        print(ran.stdout)
        assert ran.returncode == 0, "nsbox run failed in the pod's namespace (exit %d)" % ran.returncode
        lines = ran.stdout.split()
        assert lines[:4] == ["1000", "1000", "65535", "1"], "the sandbox user should map to the namespace's top id: %r" % lines[:4]
        assert "ok" in lines
        left = in_pod_namespace(nsbox, root, ["ls", "--json"])
        assert left.returncode == 0 and json.loads(left.stdout) == {"sandboxes": []}, left.stdout
        with open("/proc/self/mountinfo") as f:
            assert root not in f.read(), "a mount is left under " + root
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("tier B emulation: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
