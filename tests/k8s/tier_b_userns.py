#!/usr/bin/python3.11
"""Tier B's pod, emulated (docs/scale-out.md, "Tier B"): a user namespace mapping 65,536
ids (what `hostUsers: false` gives a pod) with the pod's own mount and PID namespaces, a
fresh /proc (`procMount: Unmasked`) and a first process that reaps, as the pause container
does. Each nsbox command enters the pod's namespaces, as `kubectl exec` does.

- As deployed (statefulset-hardened.yaml): nsbox as uid 1000 (runAsUser, fsGroup 1000),
  with no capabilities, no_new_privs and the pod's Localhost seccomp profile
  (deploy/k8s/seccomp/), on a state root owned as fsGroup leaves it: creates a sandbox
  (with `--net allow=`, whose proxy listener needs setns), which falls back to rlimits and
  quota-less directories; runs a cell and a command that writes and reads /mnt/files, and
  removes it.
- The container's own script from the manifest, paths moved under a temp dir and the port
  changed, runs the same way: it copies the tokens (group-readable under fsGroup) to
  private files, skips the cgroup step (no writable cgroup here), and `nsbox serve` fills
  its warm pool and takes the token; the preStop hook drains it and it exits.
- Under the runtime's default seccomp profile instead, nsbox cannot make a sandbox: the
  profile's additions are needed, and the filter this test loads is really applied.
- As root of the pod (the earlier tier B): `nsbox run` works, its user mapped to the
  namespace's highest id.

Nothing is left: no sandbox, no mount under the state root, no process in the pod but its
first; the pod's processes are reaped and the temp dir is removed.

  tests/k8s/tier_b_userns.py NSBOX_BIN
  stdout: what each step saw, then "tier B emulation: ok"; "SKIP: reason" (exit 77, CTest's skip) when not
          root (writing a 65,536-id map needs it)
  exit:   0 when it passed, 1 otherwise
"""
import ctypes
import errno
import json
import os
import re
import select
import shutil
import socket
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWPID = 0x10000000, 0x00020000, 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x8, 0x4000, 0x40000
PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP = 38, 24
OUTSIDE = 300000  # the pod's ids on the node: 300000..365535
POD_USER = 1000  # runAsUser, runAsGroup and fsGroup of statefulset-hardened.yaml
REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "deploy/k8s/statefulset-hardened.yaml"
STEP_S = 120  # a bound for one nsbox command; each takes seconds

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def nsbox_seccomp_needs() -> set:
    """What nsbox adds to the runtime's default seccomp profile: policy.mjs's list, which
    the policy test checks the shipped profile against."""
    policy = (REPO / "tests/k8s/policy.mjs").read_text()
    listed = re.search(r"export const nsboxSeccompNeeds = \[(.*?)\];", policy, re.S)
    return set(re.findall(r'"([a-z0-9_]+)"', listed.group(1)))


def check(rc: int, what: str) -> None:
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, "%s: %s" % (what, os.strerror(e)))


class Seccomp:
    """An OCI seccomp profile (the format containerd reads for a Localhost profile), loaded
    as runc loads it: names the local libseccomp does not know are skipped, and rules
    whose action is the default are left out."""

    ACTIONS = {"SCMP_ACT_ALLOW": 0x7FFF0000, "SCMP_ACT_ERRNO": 0x00050000}
    OPS = {"SCMP_CMP_NE": 1, "SCMP_CMP_LT": 2, "SCMP_CMP_LE": 3, "SCMP_CMP_EQ": 4,
           "SCMP_CMP_GE": 5, "SCMP_CMP_GT": 6, "SCMP_CMP_MASKED_EQ": 7}
    ARCHES = {"SCMP_ARCH_X86_64": b"x86_64", "SCMP_ARCH_X86": b"x86", "SCMP_ARCH_X32": b"x32",
              "SCMP_ARCH_AARCH64": b"aarch64", "SCMP_ARCH_ARM": b"arm"}

    class ArgCmp(ctypes.Structure):
        _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),
                    ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]

    def __init__(self, profile: dict):
        self.profile = profile

    def action(self, name: str, errno_ret) -> int:
        if name not in self.ACTIONS:
            raise ValueError("action %s: this loader knows %s" % (name, ", ".join(self.ACTIONS)))
        return self.ACTIONS[name] | ((errno.EPERM if errno_ret is None else errno_ret) if name == "SCMP_ACT_ERRNO" else 0)

    def without_nsbox_needs(self) -> "Seccomp":
        """The runtime's default for a container without CAP_SYS_ADMIN: this profile less
        nsbox's additions, with clone3 failing ENOSYS (containerd's contrib/seccomp)."""
        needs = nsbox_seccomp_needs()
        rules = [dict(r, names=[n for n in r["names"] if n not in needs]) for r in self.profile["syscalls"]]
        rules = [r for r in rules if r["names"]]
        rules.append({"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.ENOSYS})
        return Seccomp(dict(self.profile, syscalls=rules))

    def load(self) -> None:
        lib = ctypes.CDLL("libseccomp.so.2")
        lib.seccomp_init.restype = ctypes.c_void_p
        lib.seccomp_init.argtypes = [ctypes.c_uint32]
        lib.seccomp_arch_resolve_name.restype = ctypes.c_uint32
        lib.seccomp_arch_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
        lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                               ctypes.POINTER(self.ArgCmp)]
        lib.seccomp_load.argtypes = [ctypes.c_void_p]
        default = self.action(self.profile["defaultAction"], self.profile.get("defaultErrnoRet"))
        ctx = lib.seccomp_init(default)
        if not ctx:
            raise OSError("seccomp_init failed")
        for arch in self.profile.get("architectures", []):
            rc = lib.seccomp_arch_add(ctx, lib.seccomp_arch_resolve_name(self.ARCHES[arch]))
            if rc not in (0, -errno.EEXIST):
                raise OSError(-rc, "seccomp_arch_add %s" % arch)
        for rule in self.profile["syscalls"]:
            action = self.action(rule["action"], rule.get("errnoRet"))
            if action == default:
                continue
            args = rule.get("args") or []
            cmps = (self.ArgCmp * max(len(args), 1))(
                *[self.ArgCmp(a["index"], self.OPS[a["op"]], a["value"], a.get("valueTwo", 0)) for a in args])
            for name in rule["names"]:
                nr = lib.seccomp_syscall_resolve_name(name.encode())
                if nr == -1:
                    continue
                rc = lib.seccomp_rule_add_array(ctx, action, nr, len(args), cmps)
                if rc != 0:
                    raise OSError(-rc, "seccomp_rule_add %s" % name)
        rc = lib.seccomp_load(ctx)
        if rc != 0:
            raise OSError(-rc, "seccomp_load")


class Pod:
    """A pod with `hostUsers: false`: ids 0-65535 map to OUTSIDE on the node; its first
    process (PID 1, like pause) has mounted a /proc of the pod's PID namespace and reaps
    whatever is re-parented to it (nsbox's detached supervisors) until the pod ends."""

    def __init__(self):
        self.stop_r, self.stop_w = os.pipe()
        ready_r, ready_w = os.pipe()
        go_r, go_w = os.pipe()
        self.holder = os.fork()
        if self.holder == 0:
            code = 90
            try:
                os.close(self.stop_w)
                os.close(ready_r)
                os.close(go_w)
                check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare a user and a mount namespace")
                os.write(ready_w, b"u")
                if os.read(go_r, 1) != b"g":
                    os._exit(91)
                os.setresgid(0, 0, 0)
                os.setresuid(0, 0, 0)
                check(libc.unshare(CLONE_NEWPID), "unshare a PID namespace")
                proc_r, proc_w = os.pipe()
                first = os.fork()
                if first == 0:
                    os.close(ready_w)
                    os.close(proc_r)
                    self._first_process(proc_w)
                os.close(proc_w)
                if os.read(proc_r, 1) == b"p":
                    os.write(ready_w, b"%d" % first)
                os.close(ready_w)
                os.waitpid(first, 0)
                code = 0
            except BaseException as e:
                os.write(2, ("pod: %s\n" % e).encode())
            finally:
                os._exit(code)
        os.close(ready_w)
        os.close(go_r)
        os.close(self.stop_r)
        try:
            if os.read(ready_r, 1) != b"u":
                raise AssertionError("the pod could not unshare a user namespace")
            for name in ("uid_map", "gid_map"):
                with open("/proc/%d/%s" % (self.holder, name), "w") as f:
                    f.write("0 %d 65536\n" % OUTSIDE)
            os.write(go_w, b"g")
            with os.fdopen(ready_r, "rb") as ready:
                first = ready.read()  # its pid, once it has mounted /proc
            if not first.isdigit():
                raise AssertionError("the pod's first process did not start")
            self.first = int(first)
            self.pid_ns = os.readlink("/proc/%d/ns/pid" % self.first)
        except BaseException:
            self.end(strict=False)
            raise
        finally:
            os.close(go_w)

    def _first_process(self, proc_w: int) -> None:
        code = 92
        try:
            check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
            check(libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None), "mount /proc")
            os.write(proc_w, b"p")
            os.close(proc_w)
            while True:
                stop, _, _ = select.select([self.stop_r], [], [], 0.2)
                while True:
                    try:
                        if os.waitpid(-1, os.WNOHANG)[0] == 0:
                            break
                    except ChildProcessError:
                        break
                if stop and os.read(self.stop_r, 1) == b"":
                    code = 0
                    break
        except BaseException as e:
            os.write(2, ("pod's first process: %s\n" % e).encode())
        finally:
            os._exit(code)

    def exec(self, argv: list, env: dict, rootless: bool, seccomp: Seccomp | None = None) -> tuple[int, str]:
        """Runs argv in the pod, as `kubectl exec` would: as uid 1000 with no capabilities
        and no_new_privs (rootless), or as the pod's root; (exit status, stdout+stderr)."""
        out = tempfile.TemporaryFile()
        pid = os.fork()
        if pid == 0:
            code = 93
            try:
                spaces = [(os.open("/proc/%d/ns/%s" % (self.first, kind), os.O_RDONLY), kind, flag)
                          for kind, flag in (("user", CLONE_NEWUSER), ("mnt", CLONE_NEWNS), ("pid", CLONE_NEWPID))]
                for fd, kind, flag in spaces:
                    check(libc.setns(fd, flag), "setns " + kind)
                    os.close(fd)
                child = os.fork()  # the pod's PID namespace holds children, not the caller
                if child == 0:
                    os.dup2(out.fileno(), 1)
                    os.dup2(out.fileno(), 2)
                    become_container_user(rootless, seccomp)
                    os.execve(argv[0], argv, env)
                code = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
            except BaseException as e:
                os.write(2, ("exec in the pod: %s\n" % e).encode())
            finally:
                os._exit(code if code >= 0 else 128 - code)
        deadline = time.monotonic() + STEP_S
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                raise AssertionError("%s did not end in %d s" % (" ".join(argv[1:]), STEP_S))
            time.sleep(0.05)
        out.seek(0)
        return os.waitstatus_to_exitcode(done[1]), out.read().decode(errors="replace")

    def others(self) -> list:
        """Processes in the pod's PID namespace besides its first."""
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != self.first:
                try:
                    if os.readlink("/proc/%s/ns/pid" % entry) == self.pid_ns:
                        with open("/proc/%s/cmdline" % entry, "rb") as f:
                            found.append("%s %s" % (entry, f.read().replace(b"\0", b" ").decode(errors="replace")))
                except OSError:
                    pass  # gone meanwhile, or not ours to read
        return found

    def kill_others(self) -> None:
        for entry in self.others():
            try:
                os.kill(int(entry.split()[0]), 9)
            except ProcessLookupError:
                pass

    def mounts(self) -> str:
        with open("/proc/%d/mountinfo" % self.first) as f:
            return f.read()

    def end(self, strict: bool = True) -> None:
        """Ends the pod (its first process's exit kills what is left in it) and reaps it."""
        os.close(self.stop_w)
        _, status = os.waitpid(self.holder, 0)
        assert not strict or os.waitstatus_to_exitcode(status) == 0, "the pod ended with status %d" % status


def become_container_user(rootless: bool, seccomp: Seccomp | None) -> None:
    """In a process that just entered the pod: the container's user, as runc makes it."""
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)
    if not rootless:
        return
    # capabilities.drop: [ALL] empties the bounding set too.
    cap = 0
    while libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0:
        cap += 1
    os.setgroups([POD_USER])  # fsGroup is a supplementary group
    os.setresgid(POD_USER, POD_USER, POD_USER)
    os.setresuid(POD_USER, POD_USER, POD_USER)  # from root to non-root: capabilities cleared
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")  # allowPrivilegeEscalation: false
    with open("/proc/self/status") as f:
        status = dict(line.split(":\t", 1) for line in f.read().splitlines() if ":\t" in line)
    for field in ("CapPrm", "CapEff", "CapBnd", "CapAmb"):
        if int(status[field], 16) != 0:
            raise AssertionError("%s is %s, not empty" % (field, status[field].strip()))
    if seccomp:
        seccomp.load()


def localhost_profile() -> Path:
    """The seccomp profile the hardened StatefulSet names, as shipped in deploy/k8s/seccomp."""
    named = re.findall(r"^\s*localhostProfile:\s*(\S+)\s*$", MANIFEST.read_text(), re.M)
    assert len(named) == 1, "%s should name one Localhost seccomp profile: %r" % (MANIFEST, named)
    return REPO / "deploy/k8s/seccomp" / named[0]


def assert_nothing_left(pod: Pod, nsbox_in_pod, root: str) -> None:
    code, out = nsbox_in_pod(["ls", "--json"])
    assert code == 0 and json.loads(out) == {"sandboxes": []}, "sandboxes are left: %s" % out
    deadline = time.monotonic() + 10  # a removed sandbox's supervisor exits within a second or two
    while (left := pod.others()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, "processes are left in the pod: %s" % left
    for where, table in (("the pod", pod.mounts()), ("the node", Path("/proc/self/mountinfo").read_text())):
        assert root not in table, "a mount is left under %s, in %s" % (root, where)


def deployed(pod: Pod, nsbox: str, root: str, profile: Seccomp) -> None:
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/"}

    def rootless(args, seccomp=profile, show=True):
        code, out = pod.exec([nsbox, "--root", root] + args, env, rootless=True, seccomp=seccomp)
        shown = out.rstrip() if show else "..."
        print("$ nsbox %s (uid %d) -> %d\n%s" % (" ".join(args), POD_USER, code, shown))
        return code, out

    code, out = rootless(["run", "--", "true"], seccomp=profile.without_nsbox_needs())
    assert code != 0 and "clone3" in out, "nsbox made a sandbox under the runtime's default seccomp profile"

    # --net allow= works in tier B (an egress proxy, no device), and its listener inside the
    # sandbox is what needs setns.
    code, out = rootless(["create", "--name", "tierb", "--net", "allow=pypi.org"])
    assert code == 0, "nsbox create failed as uid %d in the pod" % POD_USER
    # What tier B loses without a delegated cgroup: rlimits, and volumes without a quota.
    code, out = rootless(["--json", "inspect", "tierb"], show=False)
    shown = json.loads(out) if code == 0 else {}
    files = shown.get("files", {})
    print("limits: %s; files: %s, quota %s" % (shown.get("enforcement"), files.get("kind"), files.get("quota_bytes")))
    assert shown.get("enforcement") == "rlimits", "limits: %r" % shown.get("enforcement")
    for volume in ("files", "home"):
        assert shown[volume]["kind"] == "directory" and shown[volume]["quota_bytes"] == 0, shown[volume]
    code, out = rootless(["exec", "tierb", "-c", "6 * 7"])
    assert code == 0 and out.strip() == "42", "the cell's result: %r" % out
    code, out = rootless(["sh", "tierb", "--", "id -u; echo tier-b > /mnt/files/note; cat /mnt/files/note"])
    assert code == 0 and out.split() == [str(POD_USER), "tier-b"], "the command's output: %r" % out
    written = [p for p in Path(root, "data").rglob("note") if p.is_file()]
    assert len(written) == 1 and written[0].read_text() == "tier-b\n", "the file on the volume: %r" % written
    owner = written[0].stat().st_uid
    assert owner == OUTSIDE + POD_USER, "the file belongs to uid %d on the node, not the pod's uid %d" % (owner, POD_USER)
    code, out = rootless(["rm", "tierb"])
    assert code == 0, "nsbox rm failed"
    assert_nothing_left(pod, lambda args: pod.exec([nsbox, "--root", root] + args, env, True, profile), root)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url: str, token: str | None = None) -> tuple[int, str]:
    """(status, body); status 0 while nothing listens."""
    request = urllib.request.Request(url, headers={"Authorization": "Bearer " + token} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except urllib.error.URLError:
        return 0, ""


def serve_as_deployed(pod: Pod, nsbox: str, root: str, temp: str, profile: Seccomp) -> None:
    """The StatefulSet's container: its script, env and volumes, as kubelet would give them."""
    sts = next(yaml.safe_load_all(MANIFEST.read_text()))
    spec = sts["spec"]["template"]["spec"]
    server = next(c for c in spec["containers"] if "nsbox serve" in " ".join(c.get("args", [])))
    fs_group = spec["securityContext"]["fsGroup"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    tokens = {}
    moved = {}  # mountPath -> where it is here
    for mount in server["volumeMounts"]:
        volume = volumes.get(mount["name"])
        if volume is None:  # the claim: the state root
            moved[mount["mountPath"]] = root
            continue
        here = os.path.join(temp, "mounts", mount["name"])
        os.makedirs(here, 0o755)
        os.chown(here, OUTSIDE, OUTSIDE + fs_group)
        moved[mount["mountPath"]] = here
        if "emptyDir" in volume:
            os.chmod(here, 0o2777)  # an emptyDir is 0777; fsGroup makes it the group's
        for item in volume.get("secret", {}).get("items", []):
            token = os.urandom(16).hex()
            tokens[volume["secret"]["secretName"]] = token
            path = os.path.join(here, item["path"])
            with open(path, "w") as f:
                f.write(token + "\n")
            os.chown(path, OUTSIDE, OUTSIDE + fs_group)
            os.chmod(path, item.get("mode", volume["secret"].get("defaultMode", 0o644)) | 0o440)  # fsGroup adds g+r

    port = free_port()

    def here(text: str) -> str:
        for at in sorted(moved, key=len, reverse=True):
            text = text.replace(at, moved[at])
        return text.replace("0.0.0.0:8080", "127.0.0.1:%d" % port)

    env = {"PATH": os.path.dirname(nsbox) + ":/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/"}
    fields = {"metadata.name": "nsbox-0", "metadata.namespace": "nsbox"}
    for e in server["env"]:
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "fieldRef" in e["valueFrom"]:
            env[e["name"]] = fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
    env.update(CAPACITY="4", WARM="standard=1")  # values marked "edit": small here
    argv = [server["command"][0], server["command"][1], here(server["args"][0])]
    ran = {}
    serving = threading.Thread(target=lambda: ran.update(serve=pod.exec(argv, env, True, profile)))
    serving.start()
    url = "http://127.0.0.1:%d" % port
    try:
        # The warm pool, asked with the client token (read by nsbox from its private copy).
        deadline = time.monotonic() + 60
        while (pool := http(url + "/v1/pool", tokens["nsbox-token"]))[0] != 200 or '"ready":1' not in pool[1]:
            assert serving.is_alive() and time.monotonic() < deadline, "no warm sandbox: %r %r" % (pool, ran)
            time.sleep(0.2)
        print("$ the container's script (uid %d): serving; GET /v1/pool -> %s" % (POD_USER, pool[1].strip()))
        assert http(url + "/v1/pool")[0] == 401, "the API answers without the token"
        for copy in ("token", "peer-token"):
            st = os.stat(os.path.join(moved["/run/nsbox-tokens"], copy))
            assert (st.st_mode & 0o777, st.st_uid) == (0o400, OUTSIDE + POD_USER), "the copy %s: %o" % (copy, st.st_mode)
        pre_stop = [here(w) for w in server["lifecycle"]["preStop"]["exec"]["command"]]
        pre_stop[0] = nsbox if pre_stop[0] == "nsbox" else pre_stop[0]
        code, out = pod.exec(pre_stop, env, True, profile)
        print("$ preStop: %s -> %d\n%s" % (" ".join(pre_stop[1:]), code, out.rstrip()))
        assert code == 0, "the preStop drain failed"
    except BaseException:
        pod.kill_others()
        raise
    finally:
        serving.join(STEP_S + 10)
    code, out = ran["serve"]
    print("$ the container's script -> %d" % code)
    assert code == 0, "nsbox serve did not end cleanly:\n" + out
    assert_nothing_left(pod, lambda args: pod.exec([nsbox, "--root", root] + args, env, True, profile), root)


def as_pod_root(pod: Pod, nsbox: str, root: str) -> None:
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root"}
    command = "id -u; cat /proc/self/uid_map; echo ok > /tmp/x && cat /tmp/x"
    code, out = pod.exec([nsbox, "--root", root, "run", "--", "sh", "-c", command], env, rootless=False)
    print("$ nsbox run (root of the pod) -> %d\n%s" % (code, out.rstrip()))
    assert code == 0, "nsbox run failed as root of the pod"
    words = out.split()
    assert words[:4] == ["1000", "1000", "65535", "1"], "the sandbox user should map to the pod's top id: %r" % words[:4]
    assert "ok" in words
    assert_nothing_left(pod, lambda args: pod.exec([nsbox, "--root", root] + args, env, False), root)


def main() -> int:
    nsbox = os.path.abspath(sys.argv[1])
    if os.geteuid() != 0:
        print("SKIP: tier B emulation: needs root (to write a 65,536-id map) [doctor: root]")
        return 77
    profile = Seccomp(json.loads(localhost_profile().read_text()))
    temp = tempfile.mkdtemp(prefix="nsbox-test-tierb-", dir="/tmp")
    pod = None
    try:
        os.chmod(temp, 0o755)
        # The local volume as fsGroup leaves it: the pod's root owns it, group 1000, g+rwxs.
        volume = os.path.join(temp, "volume")
        os.mkdir(volume)
        os.chown(volume, OUTSIDE, OUTSIDE + POD_USER)
        os.chmod(volume, 0o2775)
        # The earlier tier B: the pod's root owns its volume.
        root_volume = os.path.join(temp, "root-volume")
        os.mkdir(root_volume, 0o755)
        os.chown(root_volume, OUTSIDE, OUTSIDE)
        pod = Pod()
        deployed(pod, nsbox, volume, profile)
        serve_as_deployed(pod, nsbox, volume, temp, profile)
        as_pod_root(pod, nsbox, root_volume)
        pod.end()
        pod = None
    finally:
        if pod:
            pod.end(strict=False)  # after a failure: what is left in the pod is killed
        shutil.rmtree(temp, ignore_errors=True)
    assert not os.path.exists(temp), temp + " is left"
    print("tier B emulation: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
