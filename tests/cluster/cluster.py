"""A sharded nsbox cluster on this machine, for tests/cluster and bench/cluster.

What it starts, every process by pid and each with a bounded wait:

  - s3rver (tests/peers) on a loopback port: the snapshot store of every shard;
  - one `nsbox serve --shard NAME` per shard, each on a state root of its own
    (/tmp/nsbox-test-*), a port picked before any starts (peers need each other's URL),
    one client token file and one peer token file shared by all;
  - HAProxy in front (`mode http`, round robin, health-checked on GET /readyz every
    300 ms, one failure takes a server out): the stand-in for a Kubernetes Service.

The servers come from the Python client suite's own `Server` (clients/python/tests/
conftest.py, loaded under another module name so pytest does not take it for this
directory's conftest); so do the helpers that remove a state root's sandboxes.

`Cluster.close()` stops everything it started, removes every state root and temporary
directory, and returns what it found left behind (sandboxes, mounts, cgroups, processes,
directories): empty means nothing leaked.
"""
from __future__ import annotations

import csv
import hashlib
import http.client
import importlib.util
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
S3RVER_SCRIPT = os.path.join(REPO, "tests", "peers", "node_modules", "s3rver", "bin", "s3rver.js")
NSBOX_BIN = os.environ.get("NSBOX_BIN") or os.path.join(REPO, "build", "bin", "nsbox")
BUCKET = "snaps"
CLIENT_TOKEN = "cluster-client-token-5f0e2c8a9b7d4e61"
PEER_TOKEN = "cluster-peer-token-c3a1d9e07f2b4865"


def _load_client_support() -> Any:
    spec = importlib.util.spec_from_file_location(
        "nsbox_client_test_support", os.path.join(REPO, "clients", "python", "tests", "conftest.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # Its own search sorts build-asan before build; this cluster runs the binary it was given.
    setattr(module, "NSBOX_BIN", NSBOX_BIN)
    return module


support = _load_client_support()
import nsbox  # noqa: E402  (put on sys.path by the support module: the client of this checkout)


def missing_peers() -> Optional[str]:
    """Why the cluster cannot start here, or None."""
    if not os.access(NSBOX_BIN, os.X_OK):
        return "no nsbox binary at %s (build it, or set NSBOX_BIN)" % NSBOX_BIN
    if shutil.which("node") is None or not os.path.isfile(S3RVER_SCRIPT):
        return "s3rver is not installed (scripts/install-deps installs it)"
    if not os.access(HAPROXY, os.X_OK):
        return "haproxy is not installed (scripts/install-deps installs it)"
    return None


def free_port() -> int:
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
    finally:
        s.close()


def http_call(url: str, method: str, path: str, *, token: Optional[str] = None, body: Optional[bytes] = None,
              headers: Optional[Dict[str, str]] = None, timeout: float = 30) -> Tuple[int, Dict[str, str], bytes]:
    """One plain HTTP request (status, lower-case headers, body): for the answers the
    client turns into exceptions or parses for us (readiness, metrics, raw streams)."""
    host, port = url[len("http://"):].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        h = dict(headers or {})
        if token:
            h["Authorization"] = "Bearer " + token
        conn.request(method, path, body=body, headers=h)
        answer = conn.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        conn.close()


def parse_metrics(text: str) -> Dict[str, float]:
    """Prometheus text as {"name{labels}": value}."""
    samples: Dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        samples[name] = float(value)
    return samples


def shard_of(sandbox_id: str) -> str:
    """sbx-<shard>-<random> → shard."""
    parts = sandbox_id.split("-")
    assert len(parts) == 3 and parts[0] == "sbx", sandbox_id
    return parts[1]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    """Polls until ``predicate()`` is truthy and returns it; AssertionError naming ``what``
    after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError("%s: not within %.0f s" % (what, timeout))
        time.sleep(interval)


class Shard:
    """One `nsbox serve --shard NAME` on its own state root and a fixed port (kept across
    restarts, so peers and HAProxy find it again)."""

    def __init__(self, name: str, port: int, args: Sequence[str]) -> None:
        self.name = name
        self.port = port
        self.url = "http://127.0.0.1:%d" % port
        self.server = support.Server(support.make_root(), ["--listen", "127.0.0.1:%d" % port, *args])
        self.root: str = self.server.root

    @property
    def pid(self) -> int:
        assert self.server.proc is not None, "shard %s is not running" % self.name
        return int(self.server.proc.pid)

    def start(self, timeout: float = 120) -> None:
        self.server.start(timeout=timeout)
        assert self.server.url == self.url, (self.server.url, self.url)

    def alive(self) -> bool:
        return bool(self.server.alive())

    def kill9(self) -> None:
        """SIGKILL by pid (`nsbox serve` execs nsbox-server: the pid is the server's).
        Its sandboxes' supervisors are processes of their own and keep running."""
        proc, self.server.proc = self.server.proc, None
        assert proc is not None
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()

    def terminate(self) -> None:
        """SIGTERM by pid: on a sharded server, a drain."""
        os.kill(self.pid, signal.SIGTERM)

    def wait_exit(self, timeout: float) -> int:
        """The exit status once the process ends (AssertionError if it does not within
        ``timeout``: the process is left for close() to kill)."""
        proc = self.server.proc
        assert proc is not None
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("shard %s did not exit within %.0f s; log:\n%s" % (self.name, timeout, self.server.log()))
        self.server.proc = None
        if proc.stdout is not None:
            proc.stdout.close()
        return int(code)

    def readiness(self, timeout: float = 10) -> Tuple[int, Dict[str, Any]]:
        status, _, body = http_call(self.url, "GET", "/readyz", timeout=timeout)
        return status, json.loads(body or b"{}")

    def metrics(self, timeout: float = 10) -> Dict[str, float]:
        status, _, body = http_call(self.url, "GET", "/metrics", timeout=timeout)
        assert status == 200, (status, body[:200])
        return parse_metrics(body.decode())

    def forwarded(self) -> float:
        return self.metrics()["nsbox_forwarded_requests_total"]

    def local_sandboxes(self) -> List[str]:
        """Every sandbox of the state root, from the CLI (works whether the server runs or not)."""
        r = support.run_cli(self.root, "ls", "--all", "--json")
        assert r.returncode == 0, r.stderr.decode()[-500:]
        return [s["id"] for s in json.loads(r.stdout or b"{}").get("sandboxes", [])]


class HAProxy:
    """HAProxy in the foreground (-db) on a port of its own, a backend per shard."""

    def __init__(self, workdir: str, port: int, backends: Dict[str, int]) -> None:
        self.port = port
        self.url = "http://127.0.0.1:%d" % port
        self.stats_socket = os.path.join(workdir, "haproxy.sock")
        self.config = os.path.join(workdir, "haproxy.cfg")
        self.log_path = os.path.join(workdir, "haproxy.log")
        servers = "".join("  server %s 127.0.0.1:%d check\n" % (name, p) for name, p in sorted(backends.items()))
        with open(self.config, "w") as f:
            f.write(
                "global\n"
                "  maxconn 2000\n"
                "  stats socket %s mode 600 level admin\n"
                "defaults\n"
                "  mode http\n"
                # Connecting is quick or it failed; a streamed cell may run for minutes.
                "  timeout connect 2s\n"
                "  timeout client 15m\n"
                "  timeout server 15m\n"
                "  timeout http-request 60s\n"
                # A server that exited before a check noticed refuses the connection: the
                # request goes to another (it never reached the first), as a Service's would.
                "  retries 3\n"
                "  option redispatch 1\n"
                "frontend nsbox\n"
                "  bind 127.0.0.1:%d\n"
                "  default_backend shards\n"
                "backend shards\n"
                "  balance roundrobin\n"
                "  option httpchk GET /readyz\n"
                "  http-check expect status 200\n"
                "  default-server inter 300ms fall 1 rise 1\n"
                "%s" % (self.stats_socket, port, servers))
        with open(self.log_path, "wb") as log:
            self.proc: Optional[subprocess.Popen] = subprocess.Popen(
                [HAPROXY, "-db", "-f", self.config], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=support.quiet_environment())
        try:
            wait_until(lambda: self.proc is not None and (self.proc.poll() is not None or os.path.exists(self.stats_socket)),
                       30, "haproxy's stats socket")
            if self.proc.poll() is not None:
                raise AssertionError("haproxy exited (%s): %s" % (self.proc.returncode, self.log()))
        except BaseException:
            self.stop()
            raise

    def log(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-4000:].decode("utf-8", "replace")
        except OSError:
            return ""

    def states(self) -> Dict[str, str]:
        """{server: "UP" | "DOWN" | ...} as HAProxy's health checks see them now."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        try:
            s.connect(self.stats_socket)
            s.sendall(b"show stat\n")
            chunks = []
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            s.close()
        text = b"".join(chunks).decode().lstrip("# ")
        return {row["svname"]: row["status"] for row in csv.DictReader(io.StringIO(text))
                if row.get("pxname") == "shards" and row["svname"] not in ("BACKEND", "FRONTEND")}

    def wait_state(self, server: str, state: str, timeout: float = 60) -> None:
        """Until HAProxy's checks see ``server`` in ``state`` ("UP", "DOWN")."""
        seen: Dict[str, str] = {}

        def reached() -> bool:
            seen.update(self.states())
            return seen.get(server, "").startswith(state)

        try:
            wait_until(reached, timeout, "haproxy to see %s %s" % (server, state))
        except AssertionError as e:
            raise AssertionError("%s (it sees %s); log:\n%s" % (e, seen, self.log()))

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


class Cluster:
    """s3rver, one sharded server per name of ``shards``, HAProxy in front."""

    def __init__(self, shards: Sequence[str] = ("a", "b", "c"), drain_grace: float = 5,
                 extra_args: Sequence[str] = ()) -> None:
        self.workdir = tempfile.mkdtemp(prefix="nsbox-test-cluster-", dir="/tmp")
        self.s3rver: Any = None
        self.proxy: Optional[HAProxy] = None
        self.shards: Dict[str, Shard] = {}
        self.seen_ids: set = set()  # every sandbox id the test made or restored (the cgroup check)
        self.closed = False
        self._saved_env: Dict[str, Optional[str]] = {}
        self.drain_grace = drain_grace
        self.extra_args = list(extra_args)
        self.shard_names = list(shards)

    # -- starting -------------------------------------------------------------------

    def start(self) -> "Cluster":
        self._cgroups_before = _nsbox_cgroups()
        self.s3rver = support.S3rver([BUCKET])
        # The servers read the store's endpoint and keys from their environment, which
        # support.Server builds from ours.
        env = {"AWS_ACCESS_KEY_ID": "S3RVER", "AWS_SECRET_ACCESS_KEY": "S3RVER",
               "S3_ENDPOINT_URL": self.s3rver.endpoint, "AWS_REGION": "us-east-1"}
        for k, v in env.items():
            self._saved_env[k] = os.environ.get(k)
            os.environ[k] = v
        token_file = os.path.join(self.workdir, "token")
        peer_token_file = os.path.join(self.workdir, "peer-token")
        for path, token in ((token_file, CLIENT_TOKEN), (peer_token_file, PEER_TOKEN)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(token + "\n")
        self.token = CLIENT_TOKEN
        ports = {name: free_port() for name in self.shard_names}
        peers = ",".join("%s=http://127.0.0.1:%d" % (name, ports[name]) for name in self.shard_names)
        for name in self.shard_names:
            args = ["--shard", name, "--peers", peers, "--peer-token-file", peer_token_file, "--token-file", token_file,
                    "--snapshot-store", "s3://%s/cluster" % BUCKET, "--drain-grace", "%g" % self.drain_grace,
                    *self.extra_args]
            self.shards[name] = Shard(name, ports[name], args)
        for shard in self.shards.values():
            shard.start()
        self.proxy = HAProxy(self.workdir, free_port(), ports)
        for name in self.shard_names:
            self.proxy.wait_state(name, "UP")
        return self

    # -- using ----------------------------------------------------------------------

    def url(self, target: str) -> str:
        """``"proxy"`` or a shard's name."""
        if target == "proxy":
            assert self.proxy is not None
            return self.proxy.url
        return self.shards[target].url

    def client(self, target: str = "proxy", timeout: float = 120) -> nsbox.Client:
        return nsbox.Client(url=self.url(target), token=self.token, timeout=timeout)

    def restart(self, name: str) -> None:
        """Starts a stopped or killed shard again on the same root and port, and waits
        until HAProxy sends it requests again."""
        self.shards[name].start()
        assert self.proxy is not None
        self.proxy.wait_state(name, "UP")

    def track(self, sandbox_id: str) -> str:
        self.seen_ids.add(sandbox_id)
        return sandbox_id

    def logs(self) -> str:
        parts = []
        for shard in self.shards.values():
            parts.append("--- shard %s (%s) ---\n%s" % (shard.name, shard.root, shard.server.log()))
        if self.proxy is not None:
            parts.append("--- haproxy ---\n" + self.proxy.log())
        return "\n".join(parts)

    # -- stopping -------------------------------------------------------------------

    def close(self) -> List[str]:
        """Stops everything and removes every root and directory, whatever state it is
        in; returns what was left behind (empty: nothing leaked). Safe to call twice."""
        if self.closed:
            return []
        self.closed = True
        leftovers: List[str] = []
        if self.proxy is not None:
            self.proxy.stop()
        for shard in self.shards.values():
            leftovers += _retire(shard)
        if self.s3rver is not None:
            self.s3rver.stop()
        for k, v in self._saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(self.workdir, ignore_errors=True)
        leftovers += self._left_on_host()
        return leftovers

    def _left_on_host(self) -> List[str]:
        roots = [s.root for s in self.shards.values()]
        dirs = roots + [self.workdir] + ([self.s3rver.dir] if self.s3rver is not None else [])

        def look() -> List[str]:
            found = ["directory %s" % d for d in dirs if os.path.exists(d)]
            with open("/proc/mounts") as f:
                found += ["mount %s" % line.split()[1] for line in f if any(r in line for r in roots)]
            found += ["process %s" % p for p in _processes_naming(roots + [self.workdir])]
            new = _nsbox_cgroups() - self._cgroups_before
            found += ["cgroup %s" % c for c in sorted(new) if any(c.endswith("nsbox-" + i) for i in self.seen_ids)]
            if self.s3rver is not None and self.s3rver.proc.poll() is None:
                found.append("s3rver %d" % self.s3rver.proc.pid)
            return found

        # Daemonized supervisors and their cgroups go a moment after `rm` returns.
        deadline = time.monotonic() + 20
        while True:
            found = look()
            if not found or time.monotonic() > deadline:
                return found
            time.sleep(0.2)


def _retire(shard: Shard) -> List[str]:
    """Stops a running shard (SIGTERM by pid: a drain of what is left, which must end
    with exit 0 within a minute), removes with the CLI whatever sandboxes its root still
    holds (a killed server's keep running), and deletes the root. Returns what went
    wrong: a server that did not exit cleanly, sandboxes left after a clean exit."""
    left: List[str] = []
    try:
        running = shard.alive()
        code = shard.server.stop(timeout=60)
        if running and code != 0:
            left.append("shard %s did not drain and exit 0 on SIGTERM (%s); log:\n%s" % (
                shard.name, "killed after 60 s" if code == -signal.SIGKILL else "status %s" % code, shard.server.log()))
        removed = support.remove_everything(shard.root)
        if code == 0 and removed:
            left += ["sandbox %s on %s after a clean exit" % (r, shard.name) for r in removed]
    finally:
        mounts = support.mounts_under(shard.root)
        if mounts:
            left += ["mount %s" % m for m in mounts]
        else:
            shutil.rmtree(shard.root, ignore_errors=True)
    return left


def _nsbox_cgroups() -> set:
    found = set()
    for base, dirs, _ in os.walk("/sys/fs/cgroup"):
        depth = base.count("/") - "/sys/fs/cgroup".count("/")
        if depth >= 4:
            dirs[:] = []
            continue
        for d in dirs:
            if d.startswith("nsbox"):
                found.add(os.path.join(base, d))
    return found


def _processes_naming(paths: Iterable[str]) -> List[str]:
    """Live processes whose command line names one of ``paths`` (servers, supervisors)."""
    needles = [p.encode() for p in paths]
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmdline = f.read()
            with open("/proc/%s/stat" % pid, "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state != b"Z" and any(n in cmdline for n in needles):
            found.append("%s %s" % (pid, cmdline.replace(b"\0", b" ").decode("utf-8", "replace")[:160]))
    return found
