"""The cleaner's lock on a three-node Galera cluster, where ``GET_LOCK()`` is one node's lock
(tests/replicas/test_testing_replication.py): a lease row instead, that locks taken through
different nodes agree on, that a killed holder loses after its time, and that a holder whose node
dies knows it has lost.

The cluster is this module's own. The locks reach its nodes through Django aliases
``galera_node1``..``3`` added to ``connections.settings`` for the module's duration (the
``DATABASES`` entries Django would have made of the nodes' URLs): the lock is exercised as the
cleaner uses it, by alias, without a way in for tests only. They are not shards of the store.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import DEFAULT_DB_ALIAS

from schemaless_store.guards.server_lock import ServerLock
from schemaless_store.sql.server_locks import LEASE_TABLE
from schemaless_store.testing.galera import GaleraCluster
from tests.support.aliases import added as aliases_added
from tests.support.aliases import entry
from tests.support.galera import cluster_with_database

pytestmark = [pytest.mark.mariadb_only, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DATABASE = "locks"
LEASE = 3.0  # seconds: short leases, so that waiting for one to expire costs little
ALIASES = ("galera_node1", "galera_node2", "galera_node3")

# A holder in a process of its own, on the cluster as its ``default`` database: it takes the
# lock, says so, and sleeps until it is killed.
HOLDER = """
import sys, time, django
django.setup()
from schemaless_store.guards.server_lock import ServerLock
lock = ServerLock("index_link", "default")
lock.LEASE_SECONDS = float(sys.argv[1])
print("acquired" if lock.acquire(wait=30) else "refused", flush=True)
time.sleep(600)
"""


cluster = cluster_with_database(DATABASE)


@pytest.fixture(scope="module")
def nodes(cluster: GaleraCluster, django_db_blocker: Any) -> Iterator[tuple[str, ...]]:
    """The aliases of the three nodes, in ``connections`` for this module only."""
    urls = {alias: node.url(DATABASE) for alias, node in zip(ALIASES, cluster.nodes, strict=True)}
    with aliases_added(urls), django_db_blocker.unblock():
        yield ALIASES


def make_lock(alias: str, index: str = "index_link") -> ServerLock:
    lock = ServerLock(index, alias)
    lock.LEASE_SECONDS = LEASE
    lock.CLOCK_MARGIN = 0.5
    return lock


@contextlib.contextmanager
def released(*locks: ServerLock) -> Iterator[None]:
    try:
        yield
    finally:
        for lock in locks:
            lock.release()


def race(locks: list[ServerLock]) -> list[bool]:
    """``acquire()`` of each lock on a thread of its own, all at the same moment."""
    barrier = threading.Barrier(len(locks))
    got = [False] * len(locks)

    def take(number: int) -> None:
        barrier.wait()
        got[number] = locks[number].acquire()

    threads = [threading.Thread(target=take, args=(number,)) for number in range(len(locks))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return got


def lease_rows(cluster: GaleraCluster, node: int = 0) -> list[dict[str, Any]]:
    return cluster.nodes[node].query(f"SELECT name, owner FROM {DATABASE}.{LEASE_TABLE}")


def wait_for(condition: Any, timeout: float) -> float:
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, "timed out"
        time.sleep(0.05)
    return time.monotonic() - started


def test_on_galera_the_lock_is_a_lease_row(cluster: GaleraCluster, nodes: tuple[str, ...]) -> None:
    lock = make_lock(nodes[0])
    with released(lock):
        assert lock.acquire()
        assert lock.held and not lock.lost
        assert lock.describe() == (
            f"the lease 'schemaless_cleaner.{DATABASE}.index_link' in schemaless_leases on the "
            f"Galera cluster of {nodes[0]}"
        )
        # Replicated: every node has the row (the table was made on first use).
        for node in range(3):
            wait_for(lambda node=node: lease_rows(cluster, node) != [], timeout=10)
            assert lease_rows(cluster, node) == [
                {"name": f"schemaless_cleaner.{DATABASE}.index_link", "owner": lock.owner}
            ]
    assert not lock.held
    assert lease_rows(cluster) == []


def test_locks_through_different_nodes_exclude_each_other(nodes: tuple[str, ...]) -> None:
    first, second, third = (make_lock(alias) for alias in nodes)
    other_index = make_lock(nodes[2], "index_tags")
    with released(first, second, third, other_index):
        assert first.acquire()
        assert not second.acquire()
        assert not third.acquire()
        assert other_index.acquire()
        first.release()
        # Released on node 1, free on node 3 at once (causal reads, no stale "taken").
        assert third.acquire()
        assert not second.acquire()
        assert not first.acquire()
        third.release()
        assert second.acquire()


def test_takers_racing_on_every_node_get_one_winner(
    cluster: GaleraCluster, nodes: tuple[str, ...]
) -> None:
    """Three takers at the same moment, one per node: each round exactly one wins (the others
    see it taken, or fail certification at COMMIT)."""
    conflicts_before = sum(
        int(node.status("wsrep_local_cert_failures")["wsrep_local_cert_failures"])
        for node in cluster.nodes
    )
    for _round in range(15):
        locks = [make_lock(alias) for alias in nodes]
        with released(*locks):
            got = race(locks)
            assert sum(got) == 1, got
    conflicts = (
        sum(
            int(node.status("wsrep_local_cert_failures")["wsrep_local_cert_failures"])
            for node in cluster.nodes
        )
        - conflicts_before
    )
    print(f"15 rounds of 3 racing takers: {conflicts} lost at certification")


def test_the_holder_renews_its_lease(cluster: GaleraCluster, nodes: tuple[str, ...]) -> None:
    holder, taker = make_lock(nodes[0]), make_lock(nodes[2])
    with released(holder, taker):
        assert holder.acquire()
        time.sleep(2 * LEASE)
        assert holder.held
        assert not taker.acquire()


def test_a_holder_whose_lease_was_taken_knows_it(
    cluster: GaleraCluster, nodes: tuple[str, ...], caplog: pytest.LogCaptureFixture
) -> None:
    holder = make_lock(nodes[0])
    with released(holder), caplog.at_level(logging.WARNING, "schemaless_store.cleaner"):
        assert holder.acquire()
        # As if it had expired and another cleaner had taken it.
        cluster.nodes[2].query(f"UPDATE {DATABASE}.{LEASE_TABLE} SET owner = 'another'")
        wait_for(lambda: holder.lost, timeout=LEASE)
        assert not holder.held
        # The renewer marks the lease lost, then logs it: the log may come a moment later.
        wait_for(lambda: "another holder has it" in caplog.text, timeout=5)
        holder.release()
        assert lease_rows(cluster) == [{"name": holder.name, "owner": "another"}]
    cluster.nodes[0].query(f"DELETE FROM {DATABASE}.{LEASE_TABLE}")


def test_a_killed_holder_loses_its_lease_after_its_time(
    cluster: GaleraCluster, nodes: tuple[str, ...]
) -> None:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONPATH": str(ROOT),
        "SCHEMALESS_TEST_DATABASES": json.dumps(
            {DEFAULT_DB_ALIAS: entry(cluster.nodes[0].url(DATABASE))}
        ),
    }
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(LEASE)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    taker = make_lock(nodes[2])
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "acquired"
        assert not taker.acquire()
        time.sleep(LEASE)  # renewed meanwhile
        assert not taker.acquire()
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
        started = time.monotonic()
        assert taker.acquire(wait=3 * LEASE)
        waited = time.monotonic() - started
        print(f"taken {waited:.1f}s after the holder was killed (lease {LEASE:.0f}s)")
        # Its last renewal was at most a third of the lease before the kill.
        assert LEASE / 2 < waited < LEASE + 2
    finally:
        taker.release()
        if child.poll() is None:
            child.kill()
            child.wait(10)


def test_a_holder_whose_node_dies_loses_its_lease(
    cluster: GaleraCluster, nodes: tuple[str, ...], caplog: pytest.LogCaptureFixture
) -> None:
    """Its renewals fail (the connection is gone; reconnecting is refused): it counts on the
    lease until it would expire, then calls it lost. The lease expires in the cluster, where
    another node's cleaner takes it."""
    holder, taker = make_lock(nodes[0]), make_lock(nodes[2])
    try:
        with caplog.at_level(logging.WARNING, "schemaless_store.cleaner"):
            assert holder.acquire()
            assert not taker.acquire()
            cluster.nodes[0].kill()
            killed = time.monotonic()
            lost_after = wait_for(lambda: holder.lost, timeout=LEASE)
            assert taker.acquire(wait=30)  # once node 1 is evicted and the lease expired
            taken_after = time.monotonic() - killed
        assert "could not renew" in caplog.text
        assert "could not be renewed before it expired" in caplog.text
        print(
            f"node of the holder killed: lost after {lost_after:.1f}s, taken after "
            f"{taken_after:.1f}s"
        )
        holder.release()  # its node is down: the lease is not its to remove any more
        assert not holder.held
    finally:
        taker.release()
        holder.release()
        cluster.nodes[0].restart()
