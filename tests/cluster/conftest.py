"""Fixtures of the cluster tests: a fresh cluster (tests/cluster/cluster.py) per test.

Without s3rver, HAProxy or the nsbox binary the suite prints "SKIP: <reason>" and exits 77
(CTest's skip); with NSBOX_TEST_PEERS=required (CTest), or a binary named by NSBOX_BIN
that is not there, that is a failure instead.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Callable, Iterator, List

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import Cluster, missing_peers  # noqa: E402


def pytest_configure(config: Any) -> None:
    why = missing_peers()
    if why is None:
        return
    given = os.environ.get("NSBOX_BIN")
    # A binary named on purpose must be there; so must the peers under CTest.
    if os.environ.get("NSBOX_TEST_PEERS") == "required" or (given and not os.access(given, os.X_OK)):
        pytest.exit("cluster tests: " + why, returncode=1)
    print("SKIP: cluster tests: " + why + " [doctor: none]")
    pytest.exit("SKIP: " + why, returncode=77)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """A "SKIP: " line per skipped test, at a line's start, for tests/report_skips."""
    for report in terminalreporter.stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        terminalreporter.write_line("SKIP: %s: %s" % (report.nodeid, reason.removeprefix("Skipped: ")))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Iterator[Any]:
    outcome: Any = yield
    report = outcome.get_result()
    setattr(item, "report_" + report.when, report)


@pytest.fixture()
def make_cluster(request: Any) -> Iterator[Callable[..., Cluster]]:
    """``make_cluster(drain_grace=5)`` starts a cluster; at the end of the test every
    cluster made is stopped (each server must drain and exit 0 on SIGTERM) and removed,
    and the test fails if it left a sandbox on a running server or anything on the host
    (processes, mounts, cgroups, directories)."""
    made: List[Cluster] = []

    def make(**kwargs: Any) -> Cluster:
        c = Cluster(**kwargs)
        made.append(c)
        return c.start()

    yield make
    problems: List[str] = []
    for c in made:
        call = getattr(request.node, "report_call", None)
        passed = call is not None and call.passed
        if not passed:
            print(c.logs())
        if passed and not c.closed:  # (a failed test's sandboxes are its failure's doing)
            for shard in c.shards.values():
                if shard.alive():
                    problems += ["the test left %s on shard %s" % (i, shard.name) for i in shard.local_sandboxes()]
        problems += c.close()
    if problems:
        pytest.fail("left behind:\n  " + "\n  ".join(problems))
