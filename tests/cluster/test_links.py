"""Download links across shards (issue 33, from reading): a request admitted by a link's
signature alone is checked by the shard it reaches before anything is relayed, so a forged
or altered link is refused there (403) without a connection to a peer, whatever shard its
sandbox id names; a true link of shard b opens through shard a, and links signed by one
shard are the links every shard of the set checks (one key, derived from the peer token).

Two shards and s3rver (tests/cluster/cluster.py)."""
from __future__ import annotations

import json
import re
from typing import Any

from cluster import Cluster, http_call, nsbox


def forwarded(cluster: Cluster, shard: str) -> int:
    """Requests shard ``shard`` relayed to another, or tried to (its /metrics)."""
    status, _, body = http_call(cluster.url(shard), "GET", "/metrics", timeout=30)
    assert status == 200, body[:300]
    total = 0
    for name in ("nsbox_forwarded_requests_total", "nsbox_forward_failures_total"):
        found = re.search(rb"^" + name.encode() + rb" (\d+)$", body, re.M)
        assert found, name
        total += int(found.group(1))
    return total


def sign(cluster: Cluster, shard: str, sandbox_id: str, path: str) -> str:
    status, _, body = http_call(cluster.url(shard), "POST", "/v1/sandboxes/%s/files:sign?path=%s" % (sandbox_id, path),
                                token=cluster.token, body=b"{}", headers={"Content-Type": "application/json"})
    assert status == 200, body
    return str(json.loads(body)["download_path"])


def test_a_forged_link_is_refused_where_it_arrives_and_a_true_one_is_relayed(make_cluster: Any) -> None:
    cluster = make_cluster(shards=("a", "b"))
    sandbox = nsbox.Sandbox.create(client=cluster.client("b"))
    cluster.track(sandbox.id)
    try:
        sandbox.files.upload(b"the report\n", "report.txt")
        link = sign(cluster, "b", sandbox.id, "report.txt")
        a = cluster.url("a")

        # Signed by b, checked and relayed by a.
        before = forwarded(cluster, "a")
        status, _, got = http_call(a, "GET", link, timeout=60)
        assert (status, got) == (200, b"the report\n")
        assert forwarded(cluster, "a") == before + 1

        # Signed by a for b's sandbox: the same key, so b opens it too.
        status, _, got = http_call(cluster.url("b"), "GET", sign(cluster, "a", sandbox.id, "report.txt"), timeout=60)
        assert (status, got) == (200, b"the report\n")

        altered = link.replace("report.txt", "other.txt")
        forged_shard = re.sub(r"/v1/sandboxes/sbx-b-", "/v1/sandboxes/sbx-nowhere-", link)
        bad_signature = re.sub(r"signature=[^&]*", "signature=AAAA", link)
        expired = re.sub(r"expires=\d+", "expires=1", link)
        before = forwarded(cluster, "a")
        for bad in (altered, forged_shard, bad_signature, expired):
            status, _, body = http_call(a, "GET", bad, timeout=60)
            assert status == 403, (bad, status, body[:300])
            assert json.loads(body)["error"]["code"] == "permission_denied", body[:300]
        assert forwarded(cluster, "a") == before, "a forged link was relayed"
    finally:
        sandbox.remove()
