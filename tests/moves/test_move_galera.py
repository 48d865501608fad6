"""A move whose source is a Galera cluster (issue 34, items 8 and 12; docs/resharding.md):
the move log is read with the node caught up, and the fence refuses a node list that misses a
member of the cluster.

The cluster is this module's own; its nodes are reached through Django aliases added to
``connections.settings`` for the module (as tests/cleaner/test_cleaner_lock_galera.py does):
``galera_node1``/``2`` one node each, ``galera_two`` a ``galera://`` URL that lists two of
the three nodes, ``galera_all`` one that lists all three, ``galera_node3`` the third node
(where a mover's DDL runs while writers use the other two).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import MySQLdb
import pytest
from django.db import OperationalError

from schemaless_store.exceptions import MoveRefused
from schemaless_store.guards import fence
from schemaless_store.tables import move_log as capture
from schemaless_store.tables.moved_rows import MovedTable
from schemaless_store.testing.galera import GaleraCluster, GaleraNode
from tests.support.aliases import added as aliases_added
from tests.support.galera import cluster_with_database

pytestmark = [pytest.mark.mariadb_only, pytest.mark.slow]

DATABASE = "moves"


cluster = cluster_with_database(DATABASE)


def listing(nodes: list[GaleraNode]) -> str:
    return ",".join(f"127.0.0.1:{node.port}" for node in nodes)


@pytest.fixture(scope="module")
def aliases(cluster: GaleraCluster, django_db_blocker: Any) -> Iterator[None]:
    added = {
        "galera_node1": cluster.nodes[0].url(DATABASE),
        "galera_node2": cluster.nodes[1].url(DATABASE),
        "galera_node3": cluster.nodes[2].url(DATABASE, read_timeout="30"),
        "galera_two": f"galera://root@{listing(cluster.nodes[:2])}/{DATABASE}",
        "galera_all": f"galera://root@{listing(cluster.nodes)}/{DATABASE}",
    }
    with aliases_added(added), django_db_blocker.unblock():
        yield


def connect(node: GaleraNode, database: str | None = None, read_timeout: int = 0) -> Any:
    options = {"read_timeout": read_timeout} if read_timeout else {}
    connection = MySQLdb.connect(
        host="127.0.0.1",
        port=node.port,
        user="root",
        connect_timeout=5,
        db=database or "",
        **options,
    )
    connection.autocommit(True)
    return connection


def test_the_move_log_is_read_with_the_node_caught_up(cluster, aliases):
    """Node 1 applies other nodes' writes late (its applier held by a read lock for a
    second): an entry committed through node 2 must still be in node 1's read of the log,
    or the final replay would miss that write and the verification hide its loss."""
    capture.install("galera_node1", [])
    key = b"\x01" * 16
    holder = connect(cluster.nodes[0])
    holder.cursor().execute("FLUSH TABLES WITH READ LOCK")  # node 1 applies nothing now
    try:
        writer = connect(cluster.nodes[1], DATABASE)
        writer.cursor().execute(
            f"INSERT INTO {capture.LOG} (tbl, row_key) VALUES ('entities', %s)", [key]
        )
        writer.close()
        threading.Timer(1.0, lambda: holder.cursor().execute("UNLOCK TABLES")).start()
        began = time.monotonic()
        entries = capture.read("galera_node1", 10)
        assert [(name, found) for _seq, name, found in entries] == [("entities", key)]
        assert time.monotonic() - began >= 0.5  # it waited for the applier
    finally:
        time.sleep(1.2)
        holder.close()
        capture.remove("galera_node1", [])


def test_the_fence_refuses_a_node_list_that_misses_a_member(cluster, aliases):
    """The cluster has three members; a shard that lists two (or names one node as a plain
    server) would have its fence visit only those. It refuses before it changes anything."""
    assert fence.unready("galera_all") is None
    problem = fence.unready("galera_two")
    assert problem is not None
    assert "lists 2 Galera node(s)" in problem and "3 member(s)" in problem
    assert "List every node" in problem
    assert "lists 1 Galera node(s)" in (fence.unready("galera_node1") or "")
    session = connect(cluster.nodes[0], DATABASE)
    try:
        with pytest.raises(MoveRefused, match="lists 2 Galera node"):
            fence.withdraw("galera_two", [0], 2, end_connections=True)
        session.cursor().execute("SELECT 1")  # not ended
    finally:
        session.close()


# How long the mover's trigger and table DDL cycles while the writers commit (seconds).
DDL_CYCLING = 40
STALLED = 30  # a writer that waits this long for an answer: the cluster has stalled
ROWS = 100


def test_no_acknowledged_commit_is_discarded_while_a_moves_tables_come_and_go(cluster, aliases):
    """Writers commit through nodes 1 and 2, each transaction an update of a row (which the
    move's triggers record, in its transaction, in a table of theirs) and a receipt; node 3
    installs and removes a move's change capture again and again, as movers do at a move's
    start and end (the sources' log and the target's pre-images). On Galera a ``DROP TABLE``
    of a table that a writer's open transaction wrote through a trigger made the cluster
    discard that transaction after its ``COMMIT`` had answered success (its row events failed
    on every node, which voted the write set out; issue 43's lost writes on Galera). The
    tables now stay, emptied (docs/replicas.md#move-tables-stay-on-galera): every commit
    acknowledged is in the database, its receipt and its increment."""
    node1 = connect(cluster.nodes[0], DATABASE)
    node1.cursor().execute("CREATE TABLE rows_moved (id BINARY(16) PRIMARY KEY, v INT NOT NULL)")
    node1.cursor().execute("CREATE TABLE acks (wid BIGINT PRIMARY KEY, id BINARY(16) NOT NULL)")
    keys = [bytes([n]) * 16 for n in range(ROWS)]
    node1.cursor().executemany("INSERT INTO rows_moved VALUES (%s, 0)", [(k,) for k in keys])
    node1.close()
    tables = [MovedTable("rows_moved", ("id", "v"), ("id",), ("id",), "id")]
    stop = threading.Event()
    acked: dict[int, bytes] = {}
    errors: list[int] = []
    stalled = threading.Event()

    def write(node: GaleraNode, first: int) -> None:
        rng, wid = random.Random(first), first
        session = connect(node, DATABASE, read_timeout=STALLED)
        while not stop.is_set():
            wid += 1
            key = rng.choice(keys)
            cursor = session.cursor()
            try:
                cursor.execute("BEGIN")
                cursor.execute("UPDATE rows_moved SET v = v + 1 WHERE id = %s", [key])
                cursor.execute("INSERT INTO acks VALUES (%s, %s)", [wid, key])
                cursor.execute("COMMIT")
                acked[wid] = key
            except MySQLdb.Error as exc:
                errors.append(exc.args[0])  # a conflict or an abort: refused, not acknowledged
                try:
                    cursor.execute("ROLLBACK")
                except MySQLdb.Error:
                    try:
                        session = connect(node, DATABASE, read_timeout=STALLED)
                    except MySQLdb.Error:
                        stalled.set()  # the cluster answers no more: the test fails below
                        return

    writers = [
        threading.Thread(target=write, args=(node, (number + 1) * 10**9))
        for number, node in enumerate(cluster.nodes[:2] * 2)
    ]
    for writer in writers:
        writer.start()
    rounds = 0
    try:
        until = time.monotonic() + DDL_CYCLING
        while time.monotonic() < until:
            try:
                capture.install("galera_node3", tables, pre_images=True)
                capture.install("galera_node3", tables)
                time.sleep(0.05)
            except OperationalError as exc:  # a probe write's conflict with a writer's
                assert exc.args[0] == 1213
            capture.remove("galera_node3", tables)
            rounds += 1
    finally:
        stop.set()
        for writer in writers:
            writer.join(timeout=2 * STALLED)
    assert not stalled.is_set() and not any(w.is_alive() for w in writers), (
        "the cluster stalled (a write set voted out can wedge it: see the nodes' error logs)"
    )
    checker = connect(cluster.nodes[0], DATABASE)
    cursor = checker.cursor()
    cursor.execute("SET SESSION wsrep_sync_wait = 1")
    cursor.execute("SELECT wid FROM acks")
    receipts = {wid for (wid,) in cursor.fetchall()}
    cursor.execute("SELECT id, v FROM rows_moved")
    values = {bytes(key): v for key, v in cursor.fetchall()}
    checker.close()
    wanted = dict.fromkeys(keys, 0)
    for key in acked.values():
        wanted[key] += 1
    assert rounds > 10 and len(acked) > 1000  # the DDL and the writers overlapped
    assert [wid for wid in acked if wid not in receipts] == []
    assert {k: (values[k], n) for k, n in wanted.items() if values[k] != n} == {}
    assert capture.installed("galera_node3") is False  # the kept log is no capture
    assert capture.pre_images_kept("galera_node3", tables) is False
    capture.install("galera_node3", tables, pre_images=True)
    capture.install("galera_node3", tables)
    assert capture.installed("galera_node3") and capture.pre_images_kept("galera_node3", tables)
    capture.remove("galera_node3", tables)
    assert capture.installed("galera_node3") is False
