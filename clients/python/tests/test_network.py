"""The network policy through the API (docs/network.md): a sandbox made with an allowlist
reaches out only through its egress proxy, which refuses other names with 403 (before
any DNS query, so nothing leaves the machine), says so in ``net_denials``, and takes a
new allowlist live."""
from __future__ import annotations

import pytest

import nsbox


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
