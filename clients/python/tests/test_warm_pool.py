"""`nsbox serve --warm`: creates claimed from a pool of ready sandboxes whose kernels have
imported the preload list (docs/semantics.md, "Warm pool"). One server of its own with
two standard members, preloading numpy and csv (numpy stands for the data stack; pandas
would only make the members slower to build)."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

import nsbox
from conftest import S3rver, Server, destroy_root, make_root, mounts_under, run_cli, wait_until

POOL = 2
BUILD_BOUND = 120  # a member's kernel imports numpy at the least CPU weight


def members(server: Server) -> List[Dict[str, Any]]:
    """The pool's free members: in `ls --all`, with the server's tag."""
    r = run_cli(server.root, "ls", "--all", "--json")
    assert r.returncode == 0, r.stderr
    return [s for s in json.loads(r.stdout)["sandboxes"] if s.get("pool")]


def ready(server: Server) -> List[Dict[str, Any]]:
    """The members the server would hand out now (GET /v1/pool), as `ls --all` shows them."""
    c = server.client()
    try:
        n = c.json("GET", "/v1/pool", timeout=30)["sizes"].get("standard", {}).get("ready", 0)
    finally:
        c.close()
    return [m for m in members(server) if m.get("kernel_state") == "idle"][:n]


def wait_for_ready(warm: Server, n: int) -> List[Dict[str, Any]]:
    """The pool's ready members once there are `n` (an earlier test's claims are refilled)."""
    assert wait_until(lambda: len(ready(warm)) >= n, BUILD_BOUND), warm.log()
    return ready(warm)


@contextlib.contextmanager
def pooled_server(members_wanted: int, *args: str) -> Iterator[Server]:
    """A server of its own with `--warm standard=N` and `args`, once its N members are
    ready; at the end stopped, and everything on its root removed."""
    s = Server(make_root(), ["--warm", "standard=%d" % members_wanted, *args])
    try:
        s.start()
        assert wait_until(lambda: len(ready(s)) == members_wanted, BUILD_BOUND), s.log()
        yield s
    finally:
        destroy_root(s)


@pytest.fixture(scope="module")
def warm() -> Iterator[Server]:
    with pooled_server(POOL, "--preload", "numpy,csv") as s:
        yield s


@pytest.fixture()
def client(warm: Server) -> Iterator[nsbox.Client]:
    c = warm.client()
    try:
        yield c
    finally:
        c.close()


def claim(warm: Server, client: nsbox.Client, **kwargs: Any) -> nsbox.Sandbox:
    wait_for_ready(warm, 1)
    sbx = nsbox.Sandbox.create(client=client, **kwargs)
    assert sbx.info().raw["create_path"] == "warm", sbx.info().raw
    return sbx


def _cpu_weight(info: Dict[str, Any]) -> Optional[Tuple[str, str]]:
    """(the cgroup's CPU weight as the kernel shows it, the default's) or None."""
    cgroup = info["cgroup"]
    cpu = [d for d in cgroup["dirs"] if "/cpu" in d]
    if cgroup["driver"] == "v1" and cpu:
        with open(os.path.join(cpu[0], "cpu.shares")) as f:
            return f.read().strip(), "1024"
    if cgroup["driver"] == "v2" and os.path.exists(os.path.join(cgroup["dirs"][0], "cpu.weight")):
        with open(os.path.join(cgroup["dirs"][0], "cpu.weight")) as f:
            return f.read().strip(), "100"
    return None


def test_members_are_hidden_from_ls_and_wait_at_the_least_cpu_weight(warm: Server) -> None:
    free = wait_for_ready(warm, POOL)
    assert len(free) == POOL
    plain = run_cli(warm.root, "ls", "--json")
    assert [s for s in json.loads(plain.stdout)["sandboxes"] if s.get("pool")] == []
    assert warm.sandboxes() == []  # GET /v1/sandboxes hides them too
    for m in free:
        assert m["pool"].startswith("nsbox-server:") and m["preload"] == ["numpy", "csv"]
    weights = [_cpu_weight(m) for m in free]
    if None in weights:
        pytest.skip("no cgroup cpu controller on this host: the members' weight is not checked (the rest was) [doctor: cgroups]")
    for weight in weights:
        assert weight is not None and weight[0] == {"1024": "2", "100": "1"}[weight[1]]  # the least: v1 shares 2, v2 weight 1


def test_a_claimed_sandbox_gets_the_default_cpu_weight_at_its_first_request_or_soon_after(warm: Server, client: nsbox.Client) -> None:
    """The claim leaves the pool's weight for the reseed to run at while its answer goes
    back; the first request, or one second without any, gives the default back."""
    first = claim(warm, client)
    with first:
        if _cpu_weight(first.last_info.raw) is None:
            pytest.skip("no cgroup cpu controller on this host: no weight to check [doctor: cgroups]")
        assert first.run_code("1 + 1").results == "2"
        weight, default = _cpu_weight(first.info().raw)
        assert weight == default
    # No request after this claim (the create's answer has the cgroup): a bound gives
    # the weight back.
    idle = nsbox.Sandbox.create(client=client)
    with idle:
        info = idle.last_info.raw
        assert info["create_path"] == "warm"
        assert wait_until(lambda: _cpu_weight(info)[0] == _cpu_weight(info)[1], 30)


def test_a_free_member_cannot_be_used_before_it_is_claimed(warm: Server, client: nsbox.Client) -> None:
    free = wait_for_ready(warm, 1)[0]["id"]
    with pytest.raises(nsbox.NsboxError) as refused:
        client.json("POST", "/v1/sandboxes/%s/commands" % free, json_body={"command": "touch /tmp/planted"}, timeout=30)
    assert "is a free member of a warm pool (nsbox-server:" in str(refused.value)
    # Below the API too: its supervisor and the files volume refuse the CLI (or a second server).
    for args in (["sh", free, "--", "touch /tmp/planted"], ["exec", free, "-c", "x = 1"], ["files", free, "ls"],
                 ["snapshot", "create", free], ["pty", free, "start", "--", "bash"]):
        r = run_cli(warm.root, *args)
        assert r.returncode != 0 and b"free member of a warm pool" in r.stderr, (args, r.stdout, r.stderr)


def test_claims_get_name_env_preload_and_their_own_random_state_and_are_isolated(warm: Server, client: nsbox.Client) -> None:
    first = claim(warm, client, name="warm-one", env={"WHO": "first"})
    second = claim(warm, client, name="warm-two", env={"WHO": "second"})
    try:
        assert first.name == "warm-one" and first.info().env_names == ["WHO"]
        one = first.run_code("import os, sys, random\n"
                             "secret = 'first'\n"
                             "open('/tmp/mark', 'w').write('x'); open('/home/user/mark', 'w').write('x')\n"
                             "import subprocess; p = subprocess.Popen(['sleep', '300'])\n"
                             "print(os.environ['WHO'], 'numpy' in sys.modules, 'csv' in sys.modules, random.random(),"
                             " __import__('numpy').random.random())")
        assert one.status == "ok", one.raw
        two = second.run_code("import os, sys, random\n"
                              "print(os.environ['WHO'], 'numpy' in sys.modules, 'csv' in sys.modules, random.random(),"
                              " __import__('numpy').random.random())")
        assert two.status == "ok", two.raw
        who1, np1, csv1, r1, n1 = one.stdout.split()
        who2, np2, csv2, r2, n2 = two.stdout.split()
        assert (who1, np1, csv1) == ("first", "True", "True")
        assert (who2, np2, csv2) == ("second", "True", "True")
        assert r1 != r2 and n1 != n2  # reseeded at the claim
        # Nothing of the first is visible in the second: variable, files, process, env.
        seen = second.run_code("print('secret' in globals(), os.path.exists('/tmp/mark'), "
                               "os.path.exists('/home/user/mark'), os.environ.get('WHO'))")
        assert seen.stdout == "False False False second\n", seen.raw
        assert second.commands.run("pgrep -c -x sleep || true").stdout.strip() == b"0"
        assert second.commands.run("printenv WHO").stdout == b"second\n"  # commands get the env too
    finally:
        first.remove()
        second.remove()


def test_the_pool_refills_after_claims(warm: Server, client: nsbox.Client) -> None:
    assert wait_until(lambda: len(ready(warm)) == POOL, BUILD_BOUND), warm.log()
    before = {m["id"] for m in ready(warm)}
    sbx = claim(warm, client)
    try:
        assert sbx.id in before
        assert wait_until(lambda: len(ready(warm)) == POOL, BUILD_BOUND), warm.log()
        assert sbx.id not in {m["id"] for m in ready(warm)}
    finally:
        sbx.remove()


def test_creates_the_pool_cannot_serve_take_the_cold_path(warm: Server, client: nsbox.Client) -> None:
    for kwargs in ({"size": "medium"}, {"files_quota": "64M"}, {"net": "host"}, {"lazy_kernel": True}):
        sbx = nsbox.Sandbox.create(client=client, **kwargs)
        try:
            info = sbx.info().raw
            assert info["create_path"] == "cold" and info["preload"] == [], (kwargs, info)
            if kwargs.get("lazy_kernel"):  # no kernel until the cell below
                assert info["lazy_kernel"] is True and info["kernel_state"] == "stopped", info
            assert sbx.run_code("1 + 1").results == "2"
        finally:
            sbx.remove()


def test_creates_whose_env_or_manifest_a_member_could_not_honour_take_the_cold_path(warm: Server, client: nsbox.Client) -> None:
    # PYTHONPATH is read when the interpreter starts: a member's started before the claim.
    sbx = nsbox.Sandbox.create(client=client, env={"PYTHONPATH": "/home/user/lib"})
    try:
        assert sbx.info().raw["create_path"] == "cold"
        assert sbx.run_code("import sys; '/home/user/lib' in sys.path").results == "True"
    finally:
        sbx.remove()
    sbx = nsbox.Sandbox.create(client=client, manifest={"version": 1, "environment": {"STAGE": "test"}})
    try:
        assert sbx.info().raw["create_path"] == "cold" and sbx.info().raw["manifest_digest"]
    finally:
        sbx.remove()


def test_a_warm_kernel_shows_figures_as_a_cold_one_does(warm: Server, client: nsbox.Client) -> None:
    sbx = claim(warm, client)
    try:
        r = sbx.run_code("import os, matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.show()\nos.environ['MPLBACKEND']")
        assert r.status == "ok", r.raw
        assert r.results == "'module://nsbox_kernel.mpl_backend'"
        assert [d["type"] for d in r.raw["display"]] == ["image/png"], r.raw
    finally:
        sbx.remove()


def test_a_create_with_a_mount_takes_the_cold_path_and_works(warm: Server, client: nsbox.Client, s3rver: S3rver) -> None:
    mount = {"type": "s3", "bucket": "agents", "endpoint_url": s3rver.endpoint, "path_style": True,
             "mount_path": "/mnt/bucket", "read_only": False,
             "credentials": {"access_key_id": "S3RVER", "secret_access_key": "S3RVER"}}
    sbx = nsbox.Sandbox.create(client=client, mounts=[mount])
    try:
        assert sbx.info().raw["create_path"] == "cold"
        wrote = sbx.commands.run("echo hi > /mnt/bucket/x.txt && cat /mnt/bucket/x.txt")
        assert wrote.exit_code == 0 and wrote.stdout == b"hi\n", wrote
    finally:
        sbx.remove()


def test_a_name_in_use_is_refused_and_the_member_stays_free(warm: Server, client: nsbox.Client) -> None:
    sbx = claim(warm, client, name="taken")
    try:
        assert wait_until(lambda: len(ready(warm)) == POOL, BUILD_BOUND), warm.log()
        with pytest.raises(nsbox.NsboxError):
            nsbox.Sandbox.create(client=client, name="taken")
        assert len(ready(warm)) == POOL
    finally:
        sbx.remove()


def test_serve_stopping_removes_the_free_members_and_keeps_the_claimed() -> None:
    with pooled_server(2, "--preload", "none") as s:
        c = s.client()
        kept = nsbox.Sandbox.create(client=c, name="kept")
        c.close()
        assert kept.info().raw["create_path"] == "warm" and kept.info().raw["preload"] == []
        free = [m["id"] for m in members(s)]
        cgroups = [d for m in members(s) for d in m["cgroup"]["dirs"]]
        assert s.stop() == 0
        left = json.loads(run_cli(s.root, "ls", "--all", "--json").stdout)["sandboxes"]
        assert [x["id"] for x in left] == [kept.id]
        assert not [i for i in free if os.path.exists(os.path.join(s.root, "run", "sandboxes", i))]
        assert not [d for d in cgroups if os.path.exists(d)]
        assert run_cli(s.root, "rm", kept.id).returncode == 0
        assert mounts_under(s.root) == []


def test_members_left_by_a_killed_server_are_removed_by_the_next() -> None:
    with pooled_server(1, "--preload", "none") as s:
        orphan = members(s)[0]["id"]
        assert s.proc is not None
        os.kill(s.proc.pid, signal.SIGKILL)
        s.stop()
        s.extra_args = []
        s.start()  # no pool of its own; it sweeps the dead server's
        assert wait_until(lambda: not [m for m in members(s) if m["id"] == orphan], 60), s.log()


def test_bad_pool_and_kernel_flags_stop_the_server_with_the_flag_named() -> None:
    root = make_root()
    try:
        for args, said in ((["--warm", "huge=2"], "size"), (["--warm", "standard"], "SIZE=N"),
                           (["--warm", "standard=1", "--preload", "os;rm"], "not a module name"),
                           (["--kernel-zygote", "--no-kernel-zygote"], "contradict"),
                           (["--frobnicate"], "nsbox serve: unknown flag or missing value: --frobnicate"),
                           (["--capacity"], "nsbox serve: unknown flag or missing value: --capacity")):
            r = run_cli(root, "serve", "--socket", os.path.join(root, "api.sock"), *args, timeout=60)
            assert r.returncode == 2 and said in r.stderr.decode(), (args, r.stderr)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_memory_merging_changes_no_behaviour() -> None:
    """--memory-merge: the kernels run without address randomisation and with a fixed str
    hash seed, their preloaded heap offered to KSM; cells behave the same, random is still
    each sandbox's own."""
    with pooled_server(2, "--preload", "numpy", "--memory-merge") as s:
        c = s.client()
        a = nsbox.Sandbox.create(client=c)
        b = nsbox.Sandbox.create(client=c)
        try:
            code = ("import numpy, random, sys\n"
                    "print(int(numpy.arange(10).sum()), sorted({'b', 'a'}), 'numpy' in sys.modules,"
                    " open('/proc/self/personality').read().strip(), random.random())")
            ra, rb = a.run_code(code), b.run_code(code)
            assert ra.status == "ok" and rb.status == "ok", (ra.raw, rb.raw)
            sa, sb = ra.stdout.split(), rb.stdout.split()
            assert sa[:4] == sb[:4] and sa[0] == "45" and sa[3] == "True", (sa, sb)
            assert int(sa[4], 16) & 0x0040000, sa  # ADDR_NO_RANDOMIZE
            assert sa[5] != sb[5]  # reseeded at the claim
            assert a.info().raw["memory_merge"] is True
            assert a.commands.run("echo ok").stdout == b"ok\n"
        finally:
            a.remove()
            b.remove()
            c.close()


def test_the_pool_s_targets_change_live(warm: Server, client: nsbox.Client) -> None:
    try:
        grown = client.json("PUT", "/v1/pool", json_body={"sizes": {"medium": 1}}, timeout=30)
        assert grown["sizes"]["medium"]["target"] == 1 and grown["sizes"]["standard"]["target"] == POOL
        assert wait_until(lambda: client.json("GET", "/v1/pool")["sizes"]["medium"]["ready"] == 1, BUILD_BOUND), warm.log()
        sbx = nsbox.Sandbox.create(client=client, size="medium")
        try:
            assert sbx.info().raw["create_path"] == "warm"
        finally:
            sbx.remove()
        with pytest.raises(nsbox.NsboxError):
            client.json("PUT", "/v1/pool", json_body={"sizes": {"medium": 1000}}, timeout=30)
        with pytest.raises(nsbox.NsboxError):
            client.json("PUT", "/v1/pool", json_body={"sizes": {"huge": 1}}, timeout=30)
    finally:
        shrunk = client.json("PUT", "/v1/pool", json_body={"sizes": {"medium": 0}}, timeout=30)
    assert shrunk["sizes"]["medium"]["target"] == 0
    assert wait_until(lambda: not [m for m in members(warm) if m["size"] == "medium"], 60), members(warm)


def test_a_preload_that_fails_is_said_in_the_first_cell_and_the_rest_loads() -> None:
    with pooled_server(1, "--preload", "no_such_module_xyz,json") as s:
        c = s.client()
        sbx = nsbox.Sandbox.create(client=c)
        c.close()
        try:
            r = sbx.run_code("import sys; 'json' in sys.modules")
            assert r.results == "True", r.raw
            assert "nsbox: preload of no_such_module_xyz failed: ModuleNotFoundError" in r.stderr, r.raw
            assert "no_such_module_xyz" not in sbx.run_code("1").stderr  # said once
        finally:
            sbx.remove()


def test_metrics_report_the_pool_s_depth_without_a_token(warm: Server, client: nsbox.Client) -> None:
    """GET /metrics (Prometheus text, no token) says what GET /v1/pool says: the depth an
    autoscaler scales on."""
    import urllib.request

    def scrape() -> Dict[str, float]:
        with urllib.request.urlopen(warm.url + "/metrics", timeout=30) as answer:
            assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            text = answer.read().decode()
        samples = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, value = line.rsplit(" ", 1)
                samples[key] = float(value)
        return samples

    assert wait_until(lambda: client.json("GET", "/v1/pool")["sizes"]["standard"]["ready"] == POOL, BUILD_BOUND), warm.log()
    samples = scrape()
    assert samples['nsbox_warm_ready{size="standard"}'] == POOL, samples
    assert samples['nsbox_warm_target{size="standard"}'] == POOL
    assert samples["nsbox_ready"] == 1 and samples["nsbox_free_slots"] == float("inf")
    active = samples["nsbox_active"]
    sbx = claim(warm, client)
    try:
        # The sandboxes' counts come from a census taken at most once a second.
        assert wait_until(lambda: scrape()["nsbox_active"] == active + 1, 10), (active, scrape()["nsbox_active"])
        assert scrape()['nsbox_create_seconds_count{path="warm"}'] >= 1
    finally:
        sbx.remove()
