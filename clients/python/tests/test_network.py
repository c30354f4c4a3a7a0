"""The network policy through the API (docs/network.md): a sandbox made with an allowlist
reaches out only through its egress proxy, which refuses other names with 403 (before
any DNS query, so nothing leaves the machine), says so in ``net_denials``, and takes a
new allowlist live; packages install on import from a wheelhouse."""
from __future__ import annotations

import os
import subprocess

import pytest

import nsbox
from conftest import Server


def test_an_allowlist_is_set_at_create_shown_in_info_and_replaced_live(sock_client: nsbox.Client) -> None:
    with nsbox.Sandbox.create(net={"allow": ["pypi.example", "*.files.example:8443"]}, client=sock_client) as sbx:
        info = sbx.info()
        assert info.net == "allow"
        assert info.allowlist == ["pypi.example", "*.files.example:8443"]
        # A name off the list: the proxy answers 403 itself and says why.
        got = sbx.run_code("import urllib.request, urllib.error\n"
                           "try:\n    urllib.request.urlopen('http://not-listed.example/', timeout=20)\n"
                           "except urllib.error.HTTPError as e:\n    print(e.code, e.read().decode().strip())")
        assert got.stdout.startswith("403 nsbox: not-listed.example:80 is not in this sandbox's allowlist"), got.raw
        denials = sbx.info().net_denials
        assert denials and denials[-1]["host"] == "not-listed.example"

        changed = sbx.set_allowlist(["not-listed.example"])
        assert changed.allowlist == ["not-listed.example"]
        assert sbx.run_code("x = 1; x").results == "1"  # the sandbox went on


def test_a_bad_allowlist_is_refused_with_what_is_wrong(sock_client: nsbox.Client) -> None:
    with pytest.raises(nsbox.NsboxError) as refused:
        nsbox.Sandbox.create(net={"allow": ["*.com"]}, client=sock_client)
    assert "two labels" in str(refused.value)
    with nsbox.Sandbox.create(client=sock_client) as plain:
        with pytest.raises(nsbox.NsboxError) as not_allow:
            plain.set_allowlist(["a.example"])
        assert "only a sandbox made with --net allow=" in str(not_allow.value)


def _wheelhouse(directory: str) -> str:
    peers = os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests", "peers", "tiny_wheel.py")
    subprocess.run(["/usr/bin/python3.11", peers, directory], check=True, capture_output=True, timeout=60)
    for base, dirs, files in os.walk(directory):
        for name in dirs + files:
            os.chmod(os.path.join(base, name), 0o755 if name in dirs else 0o644)
    os.chmod(directory, 0o755)
    return directory


def test_a_cell_installs_on_import_from_a_wheelhouse_under_the_servers_root(sock_client: nsbox.Client, server: Server) -> None:
    wheels = _wheelhouse(os.path.join(server.tools_root, "wheels"))
    with nsbox.Sandbox.create(packages={"wheelhouse": wheels}, client=sock_client) as sbx:
        assert sbx.info().raw["packages"]["wheelhouse"] == wheels
        steps = []
        got = sbx.run_code("import tinypkg; tinypkg.VALUE", on_progress=lambda step, metric: steps.append(step))
        assert got.results == "42", got.raw
        assert "installing tinypkg" in steps
    with pytest.raises(nsbox.NsboxError) as refused:
        nsbox.Sandbox.create(packages={"wheelhouse": "/usr/lib"}, client=sock_client)
    assert refused.value.code == "permission_denied"
