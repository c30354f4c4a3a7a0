"""Where a sandbox's kernel came from, as the server says it: forked by its kernel zygote
(by default where the host allows it) or exec'd by the sandbox's init, in each sandbox's
`kernel_origin` (with `kernel_zygote_fallback`: why not the zygote's) and in /metrics
(`nsbox_kernel_zygote_serving`). A server that silently fell back to init for every kernel
would pass every other test; these see it (docs/api.md, docs/kernel-zygote.md)."""
from __future__ import annotations

import urllib.request
from typing import Dict, Iterator

import pytest

import nsbox
from conftest import Server, destroy_root, doctor_says_ok, make_root


def scrape(server: Server) -> Dict[str, float]:
    assert server.url is not None
    with urllib.request.urlopen(server.url + "/metrics", timeout=30) as answer:
        text = answer.read().decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line and not line.startswith("#")}


@pytest.fixture()
def no_zygote() -> Iterator[Server]:
    s = Server(make_root(), ["--no-kernel-zygote"])
    try:
        s.start()
        yield s
    finally:
        destroy_root(s)


def test_kernels_come_from_the_server_s_zygote_and_one_that_cannot_says_why(server: Server, sock_client: nsbox.Client) -> None:
    if not doctor_says_ok("kernel zygote"):
        pytest.skip("this host has no kernel zygote (root, Linux 6.9) [doctor: kernel zygote]")
    metrics = scrape(server)
    assert metrics["nsbox_kernel_zygote_serving"] == 1, metrics
    assert metrics["nsbox_kernel_zygote_starts_total"] >= 1
    with nsbox.Sandbox.create(client=sock_client) as sbx:
        # Forked outside the sandbox's pid namespace: its parent has no pid there.
        assert sbx.run_code("import os; os.getppid()").results == "0"
        info = sbx.info().raw
        assert info["kernel_origin"] == "zygote" and "kernel_zygote_fallback" not in info, info
    # A variable the interpreter reads at its start: init execs this one, and says why.
    with nsbox.Sandbox.create(env={"PYTHONPATH": "/home/user/lib"}, client=sock_client) as own:
        assert own.run_code("import os; os.getppid()").results == "1"
        info = own.info().raw
        assert info["kernel_origin"] == "init", info
        assert info["kernel_zygote_fallback"] == "its environment sets PYTHONPATH, which a kernel reads at its start"


def test_without_a_zygote_kernels_come_from_init_and_metrics_say_none_serves(no_zygote: Server) -> None:
    metrics = scrape(no_zygote)
    assert metrics["nsbox_kernel_zygote_serving"] == 0 and metrics["nsbox_kernel_zygote_starts_total"] == 0, metrics
    c = no_zygote.client("socket")
    try:
        with nsbox.Sandbox.create(client=c) as sbx:
            assert sbx.run_code("import os; os.getppid()").results == "1"
            info = sbx.info().raw
            assert info["kernel_origin"] == "init" and "kernel_zygote_fallback" not in info, info  # no zygote was given
    finally:
        c.close()
