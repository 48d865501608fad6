"""A move whose source is a Galera cluster (issue 34, items 8 and 12; docs/resharding.md):
the move log is read with the node caught up, and the fence refuses a node list that misses a
member of the cluster.

The cluster is this module's own; its nodes are reached through Django aliases added to
``connections.settings`` for the module (as tests/cleaner/test_cleaner_lock_galera.py does):
``galera_node1``/``2`` one node each, ``galera_two`` a ``galera://`` URL that lists two of
the three nodes, ``galera_all`` one that lists all three.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import MySQLdb
import pytest

from schemaless_store.exceptions import MoveRefused
from schemaless_store.guards import fence
from schemaless_store.tables import move_log as capture
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
        "galera_two": f"galera://root@{listing(cluster.nodes[:2])}/{DATABASE}",
        "galera_all": f"galera://root@{listing(cluster.nodes)}/{DATABASE}",
    }
    with aliases_added(added), django_db_blocker.unblock():
        yield


def connect(node: GaleraNode, database: str | None = None) -> Any:
    connection = MySQLdb.connect(
        host="127.0.0.1", port=node.port, user="root", connect_timeout=5, db=database or ""
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
