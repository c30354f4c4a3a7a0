"""One real `nsbox serve` for the suite, on a state root of its own.

The server listens on a unix socket and on a loopback port at once; it is stopped with
SIGTERM (by pid), then every sandbox and named volume left on its state root is removed
with the CLI, and the root (/tmp/nsbox-test-*) is deleted, whatever happened. After each
test, ``GET /v1/sandboxes`` must be empty: a test that leaves a sandbox fails (and the
sandbox is removed so the next test starts clean).

The nsbox binary: ``NSBOX_BIN`` (CTest sets it), else build*/bin/nsbox of this checkout.
Without one the whole suite prints "SKIP: ..." and exits 77 (CTest then says skipped).
Each test skipped in a run is listed at the end as "SKIP: <test>: <reason> [doctor:
<check>]" (tests/report_skips fails `make test` when `nsbox doctor` says the host has it).
"""
from __future__ import annotations

import asyncio
import contextlib
import glob
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Awaitable, Dict, Iterator, List, Optional, Sequence, TypeVar

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the package, straight from the checkout

import nsbox  # noqa: E402

REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))


def _find_binary() -> Optional[str]:
    given = os.environ.get("NSBOX_BIN")
    if given:
        return given if os.access(given, os.X_OK) else None
    for candidate in sorted(glob.glob(os.path.join(REPO, "build*", "bin", "nsbox"))):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


NSBOX_BIN = _find_binary()


def pytest_configure(config: Any) -> None:
    if NSBOX_BIN is None:
        why = ("NSBOX_BIN=%s is not an executable" % os.environ["NSBOX_BIN"]) if os.environ.get("NSBOX_BIN") else \
            "no nsbox binary (build it, or set NSBOX_BIN)"
        if os.environ.get("NSBOX_BIN"):
            # Under CTest the binary must be there: that is a failure, not a skip.
            pytest.exit("nsbox client tests: " + why, returncode=1)
        print("SKIP: nsbox client tests: " + why + " [doctor: none]")
        pytest.exit("SKIP: " + why, returncode=SKIP_EXIT_CODE)


SKIP_EXIT_CODE = 77  # CTest's SKIP_RETURN_CODE for a whole suite that did not run


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """A "SKIP: " line per skipped test, at a line's start, for tests/report_skips."""
    for report in terminalreporter.stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        terminalreporter.write_line("SKIP: %s: %s" % (report.nodeid, reason.removeprefix("Skipped: ")))


def doctor_says_ok(check: str) -> bool:
    """Whether `nsbox doctor --json` says ok for the check named `check`."""
    if NSBOX_BIN is None:
        return False
    done = subprocess.run([NSBOX_BIN, "doctor", "--json"], capture_output=True, text=True, timeout=120)
    checks = json.loads(done.stdout)["checks"]
    return any(c["name"] == check and c["level"] == "ok" for c in checks)


# The runner's proxies and CA bundle would reach the server's bucket mounts; the tests
# stay on loopback.
_DROPPED_ENV = ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                "NO_PROXY", "AWS_CA_BUNDLE", "NODE_OPTIONS", "NSBOX_ROOT", "NSBOX_URL", "NSBOX_SOCKET", "NSBOX_TOKEN",
                "NSBOX_TOKEN_FILE")


def quiet_environment(**extra: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV}
    env.update(extra)
    return env


def run_cli(root: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    assert NSBOX_BIN is not None
    return subprocess.run([NSBOX_BIN, "--root", root, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=timeout, check=False, env=quiet_environment())


T = TypeVar("T")


class Server:
    """An `nsbox serve` on ``root``: ``url`` (TCP), ``socket``, ``token_file``, ``token``."""

    def __init__(self, root: str, extra_args: Sequence[str] = ()) -> None:
        self.root = root
        self.extra_args = list(extra_args)  # e.g. ["--warm", "standard=2"]
        self.socket = os.path.join(root, "run", "api.sock")
        self.log_path = os.path.join(root, "serve.log")
        self.proc: Optional[subprocess.Popen] = None
        self.url: Optional[str] = None
        self.token_file: Optional[str] = None
        self.token: Optional[str] = None
        self.starts = 0
        # Where API callers may name a tools directory or a recording (docs/tools.md).
        self.tools_root = os.path.join(root, "tools")

    def start(self, timeout: float = 60) -> None:
        assert NSBOX_BIN is not None and self.proc is None
        os.makedirs(os.path.dirname(self.socket), exist_ok=True)
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                [NSBOX_BIN, "--root", self.root, "serve", "--socket", self.socket, "--listen", "127.0.0.1:0", *self.extra_args],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                env=quiet_environment(NSBOX_TOOLS_ROOT=self.tools_root))
        finally:
            log.close()
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.proc.stdout], [], [], max(left, 0))
            if not ready:
                self.stop()
                raise AssertionError("nsbox serve printed no ready line in %.0f s; log:\n%s" % (timeout, self.log()))
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                code = self.proc.wait(timeout=10)
                self.proc = None
                raise AssertionError("nsbox serve exited (%s) before its ready line; log:\n%s" % (code, self.log()))
            line += chunk
        ready_doc = json.loads(line.decode())
        self.url = ready_doc["url"]
        self.token_file = ready_doc["token_file"]
        assert ready_doc["socket"] == self.socket, ready_doc
        with open(self.token_file) as f:
            self.token = f.readline().strip()
        self.starts += 1

    def stop(self, timeout: float = 30) -> Optional[int]:
        """SIGTERM by pid, bounded wait, SIGKILL if it does not go; returns its status."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
        return proc.returncode

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-8000:].decode("utf-8", "replace")
        except OSError:
            return ""

    def client(self, transport: str = "socket", **kwargs: Any) -> nsbox.Client:
        if transport == "socket":
            return nsbox.Client(socket=self.socket, token=self.token, **kwargs)
        return nsbox.Client(url=self.url, token=self.token, **kwargs)

    def sandboxes(self) -> List[Dict[str, Any]]:
        c = self.client()
        try:
            return c.json("GET", "/v1/sandboxes", timeout=30)["sandboxes"]  # type: ignore[no-any-return]
        finally:
            c.close()


def remove_everything(root: str) -> List[str]:
    """Removes (with the CLI, no server needed) every sandbox and named volume of a state
    root; returns what had to be removed."""
    removed: List[str] = []
    r = run_cli(root, "ls", "--all", "--json")  # a warm pool's free members too
    if r.returncode == 0:
        for s in json.loads(r.stdout or b"{}").get("sandboxes", []):
            removed.append(s["id"])
            run_cli(root, "rm", s["id"])
    r = run_cli(root, "volume", "ls", "--json")
    if r.returncode == 0:
        for v in json.loads(r.stdout or b"{}").get("volumes", []):
            removed.append("volume " + v["name"])
            run_cli(root, "volume", "rm", v["name"])
    return removed


def mounts_under(root: str) -> List[str]:
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].replace("\\040", " ")
            if point == root or point.startswith(root + "/"):
                found.append(point)
    return found


def make_root() -> str:
    return tempfile.mkdtemp(prefix="nsbox-test-", dir="/tmp")


def destroy_root(server: Server) -> None:
    """Stops the server and removes everything it made, whatever state it is in."""
    try:
        server.stop()
    finally:
        try:
            remove_everything(server.root)
        finally:
            left = mounts_under(server.root)
            if left:
                raise AssertionError("mounts left under %s, not removing it: %s" % (server.root, left))
            shutil.rmtree(server.root, ignore_errors=True)


@contextlib.contextmanager
def started_server(extra_args: Sequence[str] = ()) -> Iterator[Server]:
    """A server on a state root of its own, started; the root and all in it removed after."""
    s = Server(make_root(), extra_args)
    try:
        s.start()
        yield s
    finally:
        destroy_root(s)


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    with started_server() as s:
        yield s


@pytest.fixture()
def fresh_server() -> Iterator[Server]:
    """A server of its own (for tests that stop and restart it)."""
    with started_server() as s:
        yield s


def arun(coro: Awaitable[T], timeout: float = 300) -> T:
    """Runs a coroutine to its end, within `timeout` seconds."""
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


@pytest.fixture()
def sdk(server: Server) -> Any:
    """nsbox.agents' client of the session's server."""
    from nsbox.agents import NsboxSandboxClient
    return NsboxSandboxClient(socket=server.socket, token=server.token)


@pytest.fixture(autouse=True)
def no_sandbox_left(request: Any) -> Iterator[None]:
    yield
    if "server" not in request.fixturenames:
        return
    server: Server = request.getfixturevalue("server")
    if not server.alive():
        return
    left = server.sandboxes()
    if left:
        ids = [s["id"] for s in left]
        c = server.client()
        try:
            for i in ids:
                try:
                    c.json("DELETE", "/v1/sandboxes/" + i, timeout=60)
                except nsbox.NotFound:
                    pass
        finally:
            c.close()
        pytest.fail("the test left sandboxes behind: %s" % ids)


@pytest.fixture(params=["socket", "tcp"])
def client(request: Any, server: Server) -> Iterator[nsbox.Client]:
    """A client over the unix socket, then over the loopback port."""
    c = server.client(request.param)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture()
def sock_client(server: Server) -> Iterator[nsbox.Client]:
    c = server.client("socket")
    try:
        yield c
    finally:
        c.close()


@pytest.fixture()
def sandbox(sock_client: nsbox.Client) -> Iterator[nsbox.Sandbox]:
    with nsbox.Sandbox.create(client=sock_client) as sbx:
        yield sbx


def wait_until(predicate: Any, timeout: float, interval: float = 0.1) -> bool:
    """Polls ``predicate`` until it holds or ``timeout`` passes; returns whether it held."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


class S3rver:
    """s3rver (tests/peers, npm) on a loopback port with its own data dir; it does not
    check signatures, so any key pair is accepted."""

    def __init__(self, buckets: List[str]) -> None:
        script = os.path.join(REPO, "tests", "peers", "node_modules", "s3rver", "bin", "s3rver.js")
        node = shutil.which("node")
        if node is None or not os.path.isfile(script):
            why = "s3rver is not installed (scripts/install-deps installs it)"
            if os.environ.get("NSBOX_TEST_PEERS") == "required":
                pytest.fail(why)
            pytest.skip(why + " [doctor: none]")
        self.dir = tempfile.mkdtemp(prefix="nsbox-test-s3rver-", dir="/tmp")
        os.mkdir(os.path.join(self.dir, "data"))
        args = [node, script, "-d", os.path.join(self.dir, "data"), "-a", "127.0.0.1", "-p", "0"]
        for b in buckets:
            args += ["--configure-bucket", b]
        self.log_path = os.path.join(self.dir, "peer.log")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         env=quiet_environment(NODE_OPTIONS="--openssl-legacy-provider"),
                                         start_new_session=True)
        self.port = 0
        deadline = time.monotonic() + 60
        marker = "S3rver listening on 127.0.0.1:"
        while time.monotonic() < deadline and self.proc.poll() is None:
            with open(self.log_path, "rb") as f:
                text = f.read().decode("utf-8", "replace")
            at = text.find(marker)
            if at >= 0:
                digits = ""
                for ch in text[at + len(marker):]:
                    if not ch.isdigit():
                        break
                    digits += ch
                if digits and len(text) > at + len(marker) + len(digits):
                    self.port = int(digits)
                    break
            time.sleep(0.1)
        if not self.port:
            self.stop()
            raise AssertionError("s3rver did not start")

    @property
    def endpoint(self) -> str:
        return "http://127.0.0.1:%d" % self.port

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture()
def s3rver() -> Iterator[S3rver]:
    peer = S3rver(["agents"])
    try:
        yield peer
    finally:
        peer.stop()
