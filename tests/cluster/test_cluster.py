"""Sharded `nsbox serve` behind a load balancer: three servers (shards a, b, c) on state
roots of their own, one s3rver as their snapshot store, HAProxy in front as the stand-in
for a Kubernetes Service (tests/cluster/cluster.py).

Every wait is bounded by a client timeout or a polling deadline; no test asserts how long
anything took. Each test gets a fresh cluster and must leave nothing behind.
"""
from __future__ import annotations

import json
import os
import random
import threading
from typing import Any, Dict, List, Optional, Tuple

import pytest

from cluster import Cluster, http_call, nsbox, sha256, shard_of, support, wait_until

SHARDS = ("a", "b", "c")
# A request for a killed owner must be answered (owner_unavailable) well within this; the
# server's own connect timeout is ~2 s. Only a hang fails it.
OWNER_GONE_TIMEOUT_S = 10
# A drain of a handful of sandboxes, snapshots included (measured: well under a second).
DRAIN_EXIT_TIMEOUT_S = 120


def entries(cluster: Cluster) -> List[str]:
    """Where a client may send a request: HAProxy, or any running server."""
    return ["proxy"] + [n for n, s in cluster.shards.items() if s.alive()]


def post_json(cluster: Cluster, target: str, path: str, body: Any, timeout: float = 60) -> Tuple[int, Any]:
    status, _, data = http_call(cluster.url(target), "POST", path, token=cluster.token, body=json.dumps(body).encode(),
                                headers={"Content-Type": "application/json"}, timeout=timeout)
    return status, json.loads(data or b"null")


def test_creates_through_the_balancer_spread_over_ready_servers(make_cluster: Any) -> None:
    """Creates sent to HAProxy land on more than one shard, and every server says it is
    ready (so none was skipped for being unready)."""
    cluster = make_cluster()
    for shard in cluster.shards.values():
        assert shard.readiness() == (200, {"ready": True})
    assert cluster.proxy is not None and set(cluster.proxy.states().values()) == {"UP"}
    client = cluster.client()
    made = []
    try:
        for _ in range(6):
            made.append(nsbox.Sandbox.create(client=client))
        shards = [shard_of(cluster.track(s.id)) for s in made]
        print("creates landed on", shards)
        assert set(shards) <= set(SHARDS)
        assert len(set(shards)) > 1, shards
        for s in made:  # each answers through the balancer, whichever server took it
            assert s.run_code("6 * 7").text == "42"
    finally:
        for s in made:
            s.remove()


def test_every_request_reaches_its_owner_through_any_server(make_cluster: Any) -> None:
    """A sandbox on shard a answers a streamed cell, a command, a 3 MiB upload and its
    download, a lookup by name and a snapshot sent to each server directly and through
    HAProxy; the servers that relayed count it in nsbox_forwarded_requests_total, the
    owner (which relays nothing) does not."""
    cluster = make_cluster()
    owner = cluster.shards["a"]
    name = "routed-%06x" % random.getrandbits(24)
    sbx = nsbox.Sandbox.create(name=name, client=cluster.client("a"))
    cluster.track(sbx.id)
    restored: Optional[nsbox.Sandbox] = None
    try:
        assert shard_of(sbx.id) == "a"
        assert sbx.run_code("n = 0").ok
        before = {n: s.forwarded() for n, s in cluster.shards.items()}
        blobs: Dict[str, bytes] = {}
        for count, target in enumerate(["a", "b", "c", "proxy"], 1):
            via = nsbox.Sandbox.connect(sbx.id, client=cluster.client(target))
            # A streamed cell: NDJSON lines, the kernel's state carried from the last one.
            status, headers, body = http_call(
                cluster.url(target), "POST", "/v1/sandboxes/%s/cells" % sbx.id, token=cluster.token,
                body=json.dumps({"code": "n += 1\nprint('via', %r, flush=True)\nn * 10" % target}).encode(),
                headers={"Content-Type": "application/json", "Accept": "application/x-ndjson"}, timeout=120)
            assert status == 200, body[:300]
            assert headers["content-type"].startswith("application/x-ndjson")
            events = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
            kinds = [e["type"] for e in events]
            assert kinds[0] == "started" and kinds[-1] == "result", kinds
            assert "".join(e["text"] for e in events if e["type"] == "stdout") == "via %s\n" % target
            assert events[-1]["status"] == "ok" and events[-1]["results"] == str(count * 10), events[-1]
            # A file up and down: the same bytes.
            data = os.urandom(3 << 20)
            path = "blob-%s.bin" % target
            record = via.files.upload(data, path)
            assert record.sha256 == sha256(data)
            assert via.files.read_bytes(path) == data
            blobs[path] = data
            # A command sees the file the upload wrote.
            done = via.commands.run("sha256sum /mnt/files/%s" % path)
            assert done.exit_code == 0 and done.stdout.split()[0].decode() == sha256(data), done.raw
            # The name is found whichever server is asked.
            assert nsbox.Sandbox.connect(name, client=cluster.client(target)).id == sbx.id
            # A snapshot is made by the owner.
            status, snap = post_json(cluster, target, "/v1/snapshots", {"sandbox": sbx.id, "include_files": True},
                                     timeout=300)
            assert status == 201, snap
            assert snap["id"].startswith("snp-") and snap["sandbox"] == sbx.id, snap
            last_snapshot = snap["id"]
        after = {n: s.forwarded() for n, s in cluster.shards.items()}
        print("forwarded before", before, "after", after)
        # Sent directly to a non-owner: cell, upload, download, command, snapshot at least.
        for n in ("b", "c"):
            assert after[n] - before[n] >= 5, (n, before, after)
        assert after["a"] == before["a"], (before, after)
        # The last snapshot, taken through HAProxy, holds every file.
        restored = nsbox.Sandbox.create(from_snapshot=last_snapshot, client=cluster.client())
        cluster.track(restored.id)
        for path, data in blobs.items():
            assert restored.files.read_bytes(path) == data, path
    finally:
        if restored is not None:
            restored.remove()
        sbx.remove()
    assert owner.alive()


def test_links_open_through_any_server_and_nothing_else_passes_without_a_token(make_cluster: Any) -> None:
    """A download link signed by the owner opens through every server without a token
    (relayed with no credential: the owner checks the signature), an altered one opens
    nowhere; a target with a fragment or a dot segment is refused before any relay; the
    peer token opens only what peers relay, and only as a relay."""
    from cluster import PEER_TOKEN
    cluster = make_cluster()
    sbx = nsbox.Sandbox.create(client=cluster.client("a"))
    cluster.track(sbx.id)
    try:
        data = os.urandom(1 << 20)
        sbx.files.upload(data, "linked.bin")
        status, _, body = http_call(cluster.url("a"), "POST", "/v1/sandboxes/%s/files:sign?path=linked.bin" % sbx.id,
                                    token=cluster.token, body=b"{}", headers={"Content-Type": "application/json"})
        assert status == 200, body
        link = json.loads(body)["download_path"]
        for target in ("a", "b", "c", "proxy"):
            status, _, got = http_call(cluster.url(target), "GET", link, timeout=60)
            assert status == 200 and got == data, (target, status, got[:200])
            altered = link.replace("signature=", "signature=0")
            status, _, got = http_call(cluster.url(target), "GET", altered, timeout=60)
            assert status == 403, (target, status, got[:200])
        # What routing sees is what a peer would get: no fragment, no dot segment.
        for bad in ("/v1/sandboxes/#/files?signature=x", "/v1/sandboxes/%s#/files?signature=x" % sbx.id,
                    "/v1/sandboxes/./files?signature=x", "/v1/sandboxes/%2e%2e/v1/sandboxes/files?signature=x"):
            status, _, got = http_call(cluster.url("b"), "GET", bad, timeout=30)
            assert status == 400, (bad, status, got[:300])
        # The peer token: only as a relay (X-Nsbox-Forwarded-By), only a sandbox's routes.
        status, _, _ = http_call(cluster.url("a"), "GET", "/v1/sandboxes/" + sbx.id, token=PEER_TOKEN)
        assert status == 401
        relay = {"X-Nsbox-Forwarded-By": "b"}
        status, _, _ = http_call(cluster.url("a"), "GET", "/v1/sandboxes/" + sbx.id, token=PEER_TOKEN, headers=relay)
        assert status == 200
        for method, path in (("GET", "/v1/sandboxes"), ("POST", "/v1/drain"), ("GET", "/v1/pool"), ("POST", "/v1/sandboxes")):
            status, _, _ = http_call(cluster.url("a"), method, path, token=PEER_TOKEN, headers=relay, body=b"{}" if method == "POST" else None)
            assert status == 401, (method, path, status)
        assert cluster.shards["a"].readiness()[0] == 200  # not drained by any of it
    finally:
        sbx.remove()


def test_tool_call_callbacks_are_served_through_a_non_owner(make_cluster: Any) -> None:
    """An embedder connected to another server than the sandbox's serves its tool calls:
    the events stream and the answers are relayed to the owner and back."""
    cluster = make_cluster()
    sbx = nsbox.Sandbox.create(tools={"backend": "callback", "call_timeout_s": 30}, client=cluster.client("a"))
    cluster.track(sbx.id)
    try:
        via_b = nsbox.Sandbox.connect(sbx.id, client=cluster.client("b"))
        server = via_b.on_tool_call(lambda helper, args: {"helper": helper, "echo": args.get("arguments")})
        try:
            got = sbx.run_code("print(run_composio_tool('ECHO', {'x': 7}))")
            assert got.status == "ok", got.raw
            assert "'echo': {'x': 7}" in got.stdout and "'helper': 'run_tool'" in got.stdout, got.stdout
            assert server.error is None
        finally:
            server.stop()
        # The events stream and the answer; the stream's relay is counted once b notices its
        # client left, which may be a moment after server.stop().
        wait_until(lambda: cluster.shards["b"].forwarded() >= 2, 30, "b to count the events stream and the answer as relayed")
    finally:
        sbx.remove()


def test_a_killed_owner_is_reported_unavailable_with_its_last_snapshot(make_cluster: Any) -> None:
    """After kill -9 of a server, a request for one of its sandboxes through another server
    or through HAProxy answers 503 owner_unavailable (never hangs) naming the sandbox's
    last snapshot when one was taken (none otherwise). That snapshot restores on another
    server with the files it holds; a file written after it is not there: the snapshot is
    the last one taken, not the sandbox's latest state."""
    cluster = make_cluster()
    victim = cluster.shards["c"]
    on_c = cluster.client("c")
    kept = os.urandom(256 << 10)
    snapped = nsbox.Sandbox.create(client=on_c)
    bare = nsbox.Sandbox.create(client=on_c)
    cluster.track(snapped.id)
    cluster.track(bare.id)
    snapped.files.upload(kept, "kept.bin")
    snapped.fs.write("/home/user/notes.txt", "written before the snapshot\n")
    snapshot = snapped.snapshot(include_files=True).id
    snapped.files.upload(b"after the snapshot", "later.txt")

    victim.kill9()
    for target in ("a", "b"):
        for attempt in ("info", "cell"):
            client = cluster.client(target, timeout=OWNER_GONE_TIMEOUT_S)
            with pytest.raises(nsbox.OwnerUnavailable) as gone:
                if attempt == "info":
                    nsbox.Sandbox.connect(snapped.id, client=client)
                else:
                    client.json("POST", "/v1/sandboxes/%s/cells" % snapped.id, json_body={"code": "1"})
            assert gone.value.status == 503 and gone.value.snapshot == snapshot, gone.value.body
        with pytest.raises(nsbox.OwnerUnavailable) as gone:
            nsbox.Sandbox.connect(bare.id, client=cluster.client(target, timeout=OWNER_GONE_TIMEOUT_S))
        assert gone.value.snapshot is None, gone.value.body
    assert cluster.proxy is not None
    cluster.proxy.wait_state("c", "DOWN")
    with pytest.raises(nsbox.OwnerUnavailable) as gone:
        nsbox.Sandbox.connect(snapped.id, client=cluster.client("proxy", timeout=OWNER_GONE_TIMEOUT_S))
    assert gone.value.snapshot == snapshot

    restored = nsbox.Sandbox.create(from_snapshot=snapshot, client=cluster.client())
    cluster.track(restored.id)
    try:
        assert shard_of(restored.id) in ("a", "b")
        assert restored.files.read_bytes("kept.bin") == kept
        assert restored.fs.read_text("/home/user/notes.txt") == "written before the snapshot\n"
        with pytest.raises(nsbox.NotFound):
            restored.files.read_bytes("later.txt")
    finally:
        restored.remove()
    # The killed server's sandboxes outlive it (their supervisors are processes of their
    # own): removed with the CLI, nothing of them is left.
    assert sorted(victim.local_sandboxes()) == sorted([snapped.id, bare.id])
    support.remove_everything(victim.root)
    assert victim.local_sandboxes() == []


def test_a_drained_server_hands_its_sandboxes_over_and_leaves_nothing(make_cluster: Any) -> None:
    """`POST /v1/drain` on shard c while a cell runs there: c turns unready at once and
    HAProxy stops sending it creates, the running cell finishes normally within the grace,
    an upload during the grace (the cell still runs: it waits to be released) is served
    and kept, every sandbox is snapshotted with
    /mnt/files and /home/user, the server exits 0, and afterwards any server answers 410
    moved (a 4 MiB upload included) with a snapshot that restores elsewhere with the files.
    Nothing of c is left on the host."""
    cluster = make_cluster(drain_grace=60)
    victim = cluster.shards["c"]
    on_c = cluster.client("c")
    boxes = [nsbox.Sandbox.create(client=on_c) for _ in range(3)]
    files: Dict[str, Dict[str, bytes]] = {}
    homes: Dict[str, str] = {}
    for b in boxes:
        cluster.track(b.id)
        files[b.id] = {"data/in-files.bin": os.urandom(200 << 10)}
        b.files.upload(files[b.id]["data/in-files.bin"], "data/in-files.bin")
        homes[b.id] = "home of %s\n" % b.id
        b.fs.write("/home/user/in-home.txt", homes[b.id])
    elsewhere = nsbox.Sandbox.create(client=cluster.client("a"))
    cluster.track(elsewhere.id)
    made_during: List[nsbox.Sandbox] = []
    restored: List[nsbox.Sandbox] = []
    try:
        # A cell through HAProxy on c's first sandbox, told apart from the drain by its output;
        # it runs until the test releases it (120 s at most), so the grace lasts until then.
        started, result = threading.Event(), {}
        cell_code = ("import os, time\nprint('started', flush=True)\nfor _ in range(1200):\n"
                     "    if os.path.exists('/tmp/release'):\n        break\n    time.sleep(0.1)\n'done'")

        def run_cell() -> None:
            try:
                via = nsbox.Sandbox.connect(boxes[0].id, client=cluster.client())
                result["execution"] = via.run_code(cell_code, on_stdout=lambda text: started.set(), request_timeout=300)
            except BaseException as e:  # reported by the assertion below
                result["error"] = e

        cell = threading.Thread(target=run_cell, daemon=True)
        cell.start()
        assert started.wait(120), result
        status, answer = post_json(cluster, "c", "/v1/drain", {})
        assert status == 202, answer
        assert victim.readiness() == (503, {"ready": False, "reason": "draining"})
        assert cell.is_alive(), "the cell ended before the drain was seen: %s" % result
        assert cluster.proxy is not None
        cluster.proxy.wait_state("c", "DOWN")
        # Creates meanwhile go to the other shards only.
        for _ in range(3):
            made_during.append(nsbox.Sandbox.create(client=cluster.client()))
            cluster.track(made_during[-1].id)
        assert all(shard_of(s.id) != "c" for s in made_during), [s.id for s in made_during]
        # Requests to its sandboxes are served during the grace (docs/semantics.md, "Drain"),
        # and what they wrote survives the drain.
        assert cell.is_alive(), "the cell ended before the upload: %s" % result
        late = os.urandom(64 << 10)
        nsbox.Sandbox.connect(boxes[1].id, client=cluster.client()).files.upload(late, "late.bin")
        files[boxes[1].id]["late.bin"] = late
        nsbox.Sandbox.connect(boxes[0].id, client=cluster.client()).fs.write("/tmp/release", "")
        cell.join(300)
        assert not cell.is_alive() and "error" not in result, result
        assert result["execution"].ok and result["execution"].text == "'done'", result["execution"].raw

        assert victim.wait_exit(DRAIN_EXIT_TIMEOUT_S) == 0
        # The sandboxes of the others were not touched.
        assert nsbox.Sandbox.connect(elsewhere.id, client=cluster.client()).run_code("1 + 1").text == "2"
        for b in boxes:
            with pytest.raises(nsbox.Moved) as moved:
                nsbox.Sandbox.connect(b.id, client=cluster.client())
            assert moved.value.status == 410 and moved.value.snapshot, moved.value.body
            back = nsbox.Sandbox.create(from_snapshot=moved.value.snapshot, client=cluster.client())
            restored.append(back)
            cluster.track(back.id)
            assert shard_of(back.id) != "c"
            for path, data in files[b.id].items():
                assert back.files.read_bytes(path) == data, (b.id, path)
            assert back.fs.read_text("/home/user/in-home.txt") == homes[b.id]
        for target in ("a", "b"):  # any server knows they moved
            with pytest.raises(nsbox.Moved):
                nsbox.Sandbox.connect(boxes[2].id, client=cluster.client(target))
        # An upload larger than the socket buffers, refused before its body is read: moved
        # through HAProxy; sent to a server directly the client may instead see the
        # connection close while it still sends. Never a hang, and the server still drains
        # and exits 0 at the end (the fixture's check).
        big = os.urandom(4 << 20)
        with pytest.raises(nsbox.Moved):
            nsbox.Sandbox({"id": boxes[2].id}, cluster.client(timeout=60)).files.upload(big, "big.bin")
        with pytest.raises((nsbox.Moved, nsbox.ServerUnreachable)):
            nsbox.Sandbox({"id": boxes[2].id}, cluster.client("a", timeout=60)).files.upload(big, "big.bin")
    finally:
        for s in restored + made_during + [elsewhere]:
            s.remove()
    assert victim.local_sandboxes() == []
    assert support.mounts_under(victim.root) == []
    with open("/proc/mounts") as f:
        assert [line for line in f if victim.root in line] == []


# -- random rounds -------------------------------------------------------------------


class Box:
    """What the test knows of one sandbox: every file of /mnt/files whose write was
    acknowledged, the kernel's counter, the last snapshot taken and what it held."""

    def __init__(self, sandbox_id: str, files: Optional[Dict[str, bytes]] = None) -> None:
        self.id = sandbox_id
        self.files: Dict[str, bytes] = dict(files or {})
        self.counter = 0
        self.snapshot: Optional[str] = None
        self.state = "live"  # live | moved (to self.moved_to) | restored | removed
        self.moved_to: Optional[str] = None

    @property
    def shard(self) -> str:
        return shard_of(self.id)


class Writer(threading.Thread):
    """Uploads fresh files (never an overwrite: a write that was not acknowledged may still
    have landed) to ``boxes`` through random entries while a disruption happens, recording
    each acknowledged one in its box. Refusals from a server going away or gone are not
    acknowledgements: 503 (draining, owner_unavailable, unreachable; HAProxy's 502/503/504
    for a request cut by a kill) and 410 moved. Anything else, a timeout included, is kept
    in ``error``."""

    def __init__(self, cluster: Cluster, boxes: List["Box"], seed: int) -> None:
        super().__init__(daemon=True)
        self.cluster, self.boxes, self.rng = cluster, boxes, random.Random(seed)
        self.tag = "%08x" % seed
        self.halt = threading.Event()
        self.error: Optional[BaseException] = None
        self.acknowledged = self.refused = 0

    def run(self) -> None:
        n = 0
        while not self.halt.is_set():
            box, target = self.rng.choice(self.boxes), self.rng.choice(entries(self.cluster))
            n += 1
            path, data = "bg/%s-%05d.bin" % (self.tag, n), os.urandom(self.rng.randint(1, 64 << 10))
            client = self.cluster.client(target, timeout=60)
            try:
                nsbox.Sandbox.connect(box.id, client=client).files.upload(data, path)
            except nsbox.NsboxError as e:
                if not isinstance(e, (nsbox.Unavailable, nsbox.Moved)) and e.status not in (502, 503, 504):
                    self.error = e
                    return
                self.refused += 1
                self.halt.wait(0.05)
                continue
            except BaseException as e:
                self.error = e
                return
            finally:
                client.close()
            box.files[path] = data
            self.acknowledged += 1

    def finish(self) -> None:
        self.halt.set()
        self.join(120)
        assert not self.is_alive(), "the writer did not stop"
        assert self.error is None, repr(self.error)


class Rounds:
    """Random operations on a cluster, with what each one must do checked as it goes."""

    def __init__(self, cluster: Cluster, rng: random.Random) -> None:
        self.cluster = cluster
        self.rng = rng
        self.boxes: List[Box] = []
        self.writes = 0
        self.clients: Dict[str, nsbox.Client] = {}

    def log(self, *words: Any) -> None:
        print("cluster:", *words, flush=True)

    def live(self, shard: Optional[str] = None) -> List[Box]:
        return [b for b in self.boxes if b.state == "live" and (shard is None or b.shard == shard)]

    def reachable(self) -> List[Box]:
        """Live sandboxes whose owner runs."""
        return [b for b in self.live() if self.cluster.shards[b.shard].alive()]

    def sandbox(self, box: Box, target: Optional[str] = None) -> nsbox.Sandbox:
        return nsbox.Sandbox.connect(box.id, client=self.client(target or self.rng.choice(entries(self.cluster))))

    def client(self, target: str = "proxy") -> nsbox.Client:
        """One client per entry, kept (a restarted server's connection is made again)."""
        if target not in self.clients:
            self.clients[target] = self.cluster.client(target)
        return self.clients[target]

    # -- ordinary operations ------------------------------------------------------------

    def create(self) -> None:
        sbx = nsbox.Sandbox.create(client=self.client())
        self.boxes.append(Box(self.cluster.track(sbx.id)))
        self.log("create", sbx.id)

    def cell(self) -> None:
        box = self.rng.choice(self.reachable())
        r = self.sandbox(box).run_code("c = globals().get('c', 0) + 1\nc")
        box.counter += 1
        assert r.ok and r.text == str(box.counter), (box.id, box.counter, r.raw)

    def command(self) -> None:
        box = self.rng.choice(self.reachable())
        if not box.files:
            r = self.sandbox(box).commands.run("true")
            assert r.exit_code == 0, r.raw
            return
        path = self.rng.choice(sorted(box.files))
        r = self.sandbox(box).commands.run(["sha256sum", "/mnt/files/" + path])
        assert r.exit_code == 0 and r.stdout.split()[0].decode() == sha256(box.files[path]), (box.id, path, r.raw)

    def write(self) -> None:
        box = self.rng.choice(self.reachable())
        if box.files and self.rng.random() < 0.3:
            path = self.rng.choice(sorted(box.files))  # an overwrite
        else:
            self.writes += 1
            path = "w/%04d.bin" % self.writes
        data = os.urandom(self.rng.randint(1, 512 << 10))
        record = self.sandbox(box).files.upload(data, path)
        assert record.sha256 == sha256(data)
        box.files[path] = data  # acknowledged

    def snapshot(self) -> None:
        box = self.rng.choice(self.reachable())
        box.snapshot = self.sandbox(box).snapshot(include_files=True).id
        self.log("snapshot", box.id, box.snapshot)

    def remove(self) -> None:
        box = self.rng.choice(self.reachable())
        self.sandbox(box).remove()
        box.state = "removed"
        self.log("remove", box.id)

    def restore(self) -> None:
        box = self.rng.choice([b for b in self.boxes if b.state == "moved"])
        with pytest.raises(nsbox.Moved) as moved:
            self.sandbox(box)
        assert moved.value.snapshot == box.moved_to, (box.id, moved.value.body)
        back = nsbox.Sandbox.create(from_snapshot=box.moved_to, client=self.client())
        box.state = "restored"
        self.boxes.append(Box(self.cluster.track(back.id), box.files))  # a fresh kernel
        self.log("restore", box.id, "->", back.id)

    def ordinary(self) -> None:
        choices = []
        if len(self.reachable()) < 6:
            choices += ["create"] * 2
        if self.reachable():
            choices += ["cell", "command", "write", "write", "write", "snapshot"]
            if len(self.reachable()) > 3:
                choices.append("remove")
        if any(b.state == "moved" for b in self.boxes):
            choices.append("restore")
        getattr(self, self.rng.choice(choices))()

    # -- disruptions -------------------------------------------------------------------

    def pick_victim(self) -> str:
        """A shard holding live sandboxes when there is one."""
        holding = sorted({b.shard for b in self.live()})
        return self.rng.choice(holding or list(SHARDS))

    def start_writer(self, name: str) -> Optional[Writer]:
        """Uploads racing the disruption, to the victim's sandboxes (none: no writer)."""
        boxes = self.live(name)
        if not boxes:
            return None
        writer = Writer(self.cluster, boxes, self.rng.randrange(1 << 32))
        writer.start()
        wait_until(lambda: writer.acknowledged or writer.error or not writer.is_alive(), 60, "a first racing write")
        return writer

    def stop_writer(self, writer: Optional[Writer]) -> None:
        if writer is not None:
            writer.finish()
            self.log("racing writes: %d acknowledged, %d refused" % (writer.acknowledged, writer.refused))

    def kill_and_restart(self, name: str) -> None:
        """kill -9 while uploads race it: the sandboxes stay up (their supervisors are
        separate processes) but unreachable: owner_unavailable with the last snapshot,
        never a hang, and a write then is refused, not acknowledged. Restarted on the same
        root and port, the server serves them again with every acknowledged file and their
        kernels' state."""
        shard = self.cluster.shards[name]
        self.log("kill -9", name, "with", [b.id for b in self.live(name)])
        writer = self.start_writer(name)
        shard.kill9()
        assert self.cluster.proxy is not None
        self.cluster.proxy.wait_state(name, "DOWN")
        for box in self.live(name):
            target = self.rng.choice(entries(self.cluster))
            client = self.cluster.client(target, timeout=OWNER_GONE_TIMEOUT_S)
            with pytest.raises(nsbox.OwnerUnavailable) as gone:
                nsbox.Sandbox.connect(box.id, client=client).files.upload(b"refused", "refused.txt")
            assert gone.value.snapshot == box.snapshot, (box.id, box.snapshot, gone.value.body)
        if self.reachable() and self.rng.random() < 0.5:
            self.ordinary()  # the rest of the cluster works meanwhile
        self.stop_writer(writer)
        self.cluster.restart(name)
        for box in self.live(name):
            sbx = self.sandbox(box)
            assert sbx.info().running, box.id
            box.counter += 1
            assert sbx.run_code("c = globals().get('c', 0) + 1\nc").text == str(box.counter), box.id

    def drain_and_restart(self, name: str) -> None:
        """A drain (SIGTERM or POST /v1/drain) while uploads race it: the server exits 0,
        every sandbox it had is `moved` to a snapshot holding every write acknowledged
        before it was closed, racing ones included; restarted on the same root and port,
        the server holds no sandbox and still answers moved for them."""
        shard = self.cluster.shards[name]
        how = self.rng.choice(["SIGTERM", "POST /v1/drain"])
        self.log("drain", name, "by", how, "with", [b.id for b in self.live(name)])
        writer = self.start_writer(name)
        if how == "SIGTERM":
            shard.terminate()
        else:
            status, answer = post_json(self.cluster, name, "/v1/drain", {})
            assert status == 202, answer
        assert shard.wait_exit(DRAIN_EXIT_TIMEOUT_S) == 0
        self.stop_writer(writer)
        assert self.cluster.proxy is not None
        self.cluster.proxy.wait_state(name, "DOWN")
        for box in self.live(name):
            with pytest.raises(nsbox.Moved) as moved:
                self.sandbox(box)
            assert moved.value.snapshot, moved.value.body
            box.state, box.moved_to = "moved", moved.value.snapshot
        assert shard.local_sandboxes() == []
        self.cluster.restart(name)
        for box in [b for b in self.boxes if b.state == "moved" and b.shard == name]:
            with pytest.raises(nsbox.Moved):
                self.sandbox(box, name)

    # -- the end -------------------------------------------------------------------

    def verify(self) -> None:
        """Every acknowledged file is in its live sandbox, or in the sandbox restored
        from the snapshot its sandbox moved to."""
        while any(b.state == "moved" for b in self.boxes):
            self.restore()
        for box in self.live():
            sbx = self.sandbox(box)
            for path, data in sorted(box.files.items()):
                assert sbx.files.read_bytes(path) == data, (box.id, path)
        self.log("verified", sum(len(b.files) for b in self.live()), "files in", len(self.live()), "sandboxes")

    def remove_all(self) -> None:
        for box in self.live():
            self.sandbox(box).remove()
            box.state = "removed"
        for client in self.clients.values():
            client.close()


def test_random_rounds_keep_every_acknowledged_write(make_cluster: Any) -> None:
    """CLUSTER_ROUNDS rounds (default 5; CLUSTER_SEED picks the randomness) of random
    creates, cells, commands, uploads (overwrites too), snapshots, removals and restores,
    each round ending with kill -9 + restart of a server, a drain + restart, or nothing
    (both kinds of disruption happen when there are two rounds or more), the victim's
    sandboxes receiving uploads from another thread while it happens.

    The guarantees checked, as they hold:
      - kill -9 of a server loses nothing: its sandboxes keep running (their supervisors
        are separate processes), requests for them answer 503 owner_unavailable with their
        last snapshot (or none) and are not acknowledged; the server restarted on the same
        root and port serves them again with every acknowledged file and the kernel's state;
      - a drain loses no acknowledged write, even one racing it (a sandbox is closed to
        requests before its snapshot): each sandbox answers 410 moved, and its snapshot
        restores, on any server, every acknowledged file (the kernel's state is not kept);
        the restarted server holds nothing;
      - at the end every acknowledged write is readable in its live sandbox or in the one
        restored from its moved snapshot, and once everything is stopped nothing is left:
        no sandbox, mount, cgroup, process or directory of the cluster.
    """
    rounds = int(os.environ.get("CLUSTER_ROUNDS", "5"))
    seed = int(os.environ.get("CLUSTER_SEED") or random.SystemRandom().randrange(1 << 32))
    print("cluster: seed %d (CLUSTER_SEED=%d reproduces the choices), %d rounds" % (seed, seed, rounds), flush=True)
    rng = random.Random(seed)
    cluster = make_cluster(drain_grace=5)
    sim = Rounds(cluster, rng)
    disruptions = ["kill", "drain"] + [rng.choice(["kill", "drain", "none"]) for _ in range(max(rounds - 2, 0))]
    rng.shuffle(disruptions)
    for _ in range(3):
        sim.create()
    for n, disruption in enumerate(disruptions[:rounds], 1):
        for _ in range(rng.randint(5, 10)):
            sim.ordinary()
        victim = sim.pick_victim()
        sim.log("round %d of %d: %s %s" % (n, rounds, disruption, victim if disruption != "none" else ""))
        if disruption == "kill":
            sim.kill_and_restart(victim)
        elif disruption == "drain":
            sim.drain_and_restart(victim)
    sim.verify()
    sim.remove_all()
    left = cluster.close()
    assert left == [], left
