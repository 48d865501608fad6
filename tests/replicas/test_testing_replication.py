"""The replication test tooling on real servers: a GTID replica of a primary
(``testing.replication.start_replica``) and a three-node Galera cluster (``testing.galera``).

The Galera tests also pin down what the store must live with on Galera: a conflicting
write fails at commit, GET_LOCK is one node's lock only, and a read on another node sees a write
committed elsewhere only with ``wsrep_sync_wait``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import MySQLdb
import pytest

from schemaless_store.testing.galera import GaleraCluster, GaleraNode
from schemaless_store.testing.mariadb import MariaDBServer, ServerError, start_servers
from schemaless_store.testing.replication import ReplicaServer, start_replica
from tests.support.galera import cluster_with_database

pytestmark = [pytest.mark.mariadb_only, pytest.mark.slow]


def connect(server: MariaDBServer, **kwargs: Any) -> Any:
    """A connection as the store makes one: root@127.0.0.1 over TCP (``server.url()``)."""
    connection = MySQLdb.connect(
        host="127.0.0.1", port=server.port, user="root", connect_timeout=5, **kwargs
    )
    connection.autocommit(True)
    return connection


def ids(server: MariaDBServer, table: str = "d.t") -> set[int]:
    return {row["id"] for row in server.query(f"SELECT id FROM {table}")}


def wait_for(condition: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


# GTID replicas ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def primary() -> Iterator[MariaDBServer]:
    (server,) = start_servers(1, binlog=True)
    # Data from before the replica exists: the replica must get it by the copy, not the log.
    server.query("CREATE DATABASE d")
    server.query("CREATE TABLE d.t (id INT PRIMARY KEY)")
    server.query("INSERT INTO d.t VALUES (1)")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def replica(primary: MariaDBServer) -> Iterator[ReplicaServer]:
    started = time.monotonic()
    server = start_replica(primary)
    print(f"replica started in {time.monotonic() - started:.1f}s")
    yield server
    server.stop()
    assert not server.root.exists()


@pytest.fixture
def caught_up(primary: MariaDBServer, replica: ReplicaServer) -> Iterator[ReplicaServer]:
    """The replica replicating without delay and caught up, before and after the test."""
    replica.start_replication()
    replica.wait_caught_up()
    yield replica
    replica.delay(0)
    replica.wait_caught_up()


def test_replica_has_the_primary_data_and_follows_its_writes(
    primary: MariaDBServer, caught_up: ReplicaServer
) -> None:
    replica = caught_up
    assert 1 in ids(replica)
    primary.query("INSERT INTO d.t VALUES (2)")
    replica.wait_caught_up()
    assert {1, 2} <= ids(replica)
    replica_pos = replica.query("SELECT @@gtid_slave_pos AS pos")[0]["pos"]
    assert replica_pos == primary.query("SELECT @@gtid_binlog_pos AS pos")[0]["pos"]
    assert replica.lag_seconds() == 0
    assert replica.server_id != primary.server_id


def test_replica_refuses_writes_through_its_url(caught_up: ReplicaServer) -> None:
    replica = caught_up
    assert replica.query("SELECT @@read_only AS ro")[0]["ro"] == 1
    connection = connect(replica)
    try:
        with pytest.raises(MySQLdb.OperationalError) as refused:
            connection.cursor().execute("INSERT INTO d.t VALUES (99)")
        assert refused.value.args[0] == 1290  # ER_OPTION_PREVENTS_STATEMENT
        connection.cursor().execute("SELECT COUNT(*) FROM d.t")  # reads are fine
    finally:
        connection.close()


def test_stopped_replication_falls_behind_then_catches_up(
    primary: MariaDBServer, caught_up: ReplicaServer
) -> None:
    replica = caught_up
    replica.stop_replication()
    primary.query("INSERT INTO d.t VALUES (3)")
    time.sleep(0.5)
    assert 3 not in ids(replica)
    assert replica.lag_seconds() is None
    assert replica.status()["Slave_SQL_Running"] == "No"
    assert not replica.replicating()
    with pytest.raises(ServerError, match="not at the primary"):
        replica.wait_caught_up(timeout=0.5)
    replica.start_replication()
    replica.wait_caught_up()
    assert 3 in ids(replica)


def test_delay_and_start_replication_return_with_the_replica_replicating(
    caught_up: ReplicaServer,
) -> None:
    """Right after START SLAVE the I/O thread is Preparing or Connecting for a moment and the
    lag is NULL, which the store's health check reads as not replicating (its reads then go to
    the primary). A test that restarts replication and then reads the replica relies on these
    returning only once the I/O thread is connected (a replica test failed once in 16 runs)."""
    replica = caught_up
    for seconds in (5, 0) * 10:
        replica.delay(seconds)
        status = replica.status()
        assert (status["Slave_IO_Running"], status["Slave_SQL_Running"]) == ("Yes", "Yes")
        assert status["Seconds_Behind_Master"] is not None
    for _ in range(10):
        replica.stop_replication()
        replica.start_replication()
        status = replica.status()
        assert (status["Slave_IO_Running"], status["Slave_SQL_Running"]) == ("Yes", "Yes")


def test_delayed_replica_lags_on_purpose(primary: MariaDBServer, caught_up: ReplicaServer) -> None:
    replica = caught_up
    replica.delay(2)
    written = time.monotonic()
    primary.query("INSERT INTO d.t VALUES (4)")
    wait_for(lambda: (replica.lag_seconds() or 0) >= 1, timeout=10)
    assert 4 not in ids(replica)
    assert replica.status()["SQL_Delay"] == 2
    replica.wait_caught_up(timeout=30)
    assert 4 in ids(replica)
    # MASTER_DELAY counts from the event's timestamp, which has whole seconds: a write at x.99 s
    # carries x and is applied at x + 2, so 1 s after it was written is all the delay promises.
    assert time.monotonic() - written >= 1.0


def test_killed_replica_restarts_and_catches_up(
    primary: MariaDBServer, caught_up: ReplicaServer
) -> None:
    replica = caught_up
    replica.kill()
    primary.query("INSERT INTO d.t VALUES (5)")
    replica.start()
    replica.wait_caught_up()
    assert 5 in ids(replica)
    assert replica.query("SELECT @@read_only AS ro")[0]["ro"] == 1


def test_replica_reconnects_to_a_restarted_primary(
    primary: MariaDBServer, caught_up: ReplicaServer
) -> None:
    replica = caught_up
    primary.kill()
    wait_for(lambda: replica.status()["Slave_IO_Running"] == "Connecting")
    assert replica.lag_seconds() is None
    assert 1 in ids(replica)  # it still serves reads
    primary.start()
    primary.query("INSERT INTO d.t VALUES (6)")
    replica.wait_caught_up()
    assert 6 in ids(replica)


def test_a_second_replica_promoted_takes_writes(
    primary: MariaDBServer, caught_up: ReplicaServer
) -> None:
    second = start_replica(primary)
    try:
        assert second.name != caught_up.name
        primary.query("INSERT INTO d.t VALUES (7)")
        second.wait_caught_up()
        assert {1, 7} <= ids(second)
        second.promote()
        primary.query("INSERT INTO d.t VALUES (8)")  # the old primary, no longer followed
        connection = connect(second)
        connection.cursor().execute("INSERT INTO d.t VALUES (9)")
        connection.close()
        second.kill()
        second.start()
        assert second.query("SELECT @@read_only AS ro")[0]["ro"] == 0
        assert second.lag_seconds() is None
        assert 9 in ids(second)
        assert 8 not in ids(second)
    finally:
        second.stop()


def test_a_replica_needs_a_binary_log() -> None:
    (plain,) = start_servers(1)  # the suite's own may have one (SCHEMALESS_TEST_REPLICAS=1)
    try:
        with pytest.raises(ServerError, match="binlog=True"):
            start_replica(plain)
        assert not list(plain.root.parent.glob("*replica*"))
    finally:
        plain.stop()


# Galera --------------------------------------------------------------------------------------


# The module's cluster (its stop is checked to leave no process and no file: conftest.py).
cluster = cluster_with_database(
    "d", "CREATE TABLE d.t (id INT AUTO_INCREMENT PRIMARY KEY, node INT, v INT DEFAULT 0)"
)


def synced_reader(node: GaleraNode) -> Any:
    """A connection whose reads wait until the node has applied every write committed in the
    cluster before them (causal reads): Galera's read-your-writes across nodes."""
    connection = connect(node)
    connection.cursor().execute("SET SESSION wsrep_sync_wait = 1")
    return connection


def count_rows(node: GaleraNode) -> int:
    connection = synced_reader(node)
    try:
        cursor = connection.cursor()
        cursor.execute("SELECT COUNT(*) FROM d.t")
        return int(cursor.fetchone()[0])
    finally:
        connection.close()


def test_cluster_is_three_synced_nodes(cluster: GaleraCluster) -> None:
    assert [node.state() for node in cluster.nodes] == ["Synced"] * 3
    for node in cluster.nodes:
        assert node.status("wsrep_cluster_size") == {"wsrep_cluster_size": "3"}
    urls = cluster.urls("d")
    assert len(set(urls)) == 3
    assert all(url.startswith("mysql://root@127.0.0.1:") for url in urls)


def test_write_on_node1_is_read_on_node3(cluster: GaleraCluster) -> None:
    node1, _, node3 = cluster.nodes
    writer = connect(node1)
    writer.cursor().execute("INSERT INTO d.t (node) VALUES (1)")
    inserted = writer.insert_id()
    writer.close()
    reader = synced_reader(node3)
    cursor = reader.cursor()
    cursor.execute("SELECT node FROM d.t WHERE id = %s", (inserted,))
    assert cursor.fetchall() == ((1,),)
    reader.close()


def test_galera_defaults_the_store_meets(cluster: GaleraCluster) -> None:
    """No row limit on a write set (wsrep_max_ws_rows 0) and 2 GB on its size; reads do not wait
    for other nodes' writes unless asked (wsrep_sync_wait 0); each node hands out its own
    auto-increment values (increment = cluster size, offset = its index)."""
    variables = cluster.nodes[0].query(
        "SELECT @@wsrep_max_ws_rows AS max_rows, @@wsrep_max_ws_size AS max_size,"
        " @@wsrep_sync_wait AS sync_wait, @@auto_increment_increment AS increment,"
        " @@wsrep_auto_increment_control AS control"
    )[0]
    assert variables == {
        "max_rows": 0,
        "max_size": 2147483647,
        "sync_wait": 0,
        "increment": 3,
        "control": 1,
    }
    offsets = {node.query("SELECT @@auto_increment_offset AS o")[0]["o"] for node in cluster.nodes}
    assert offsets == {1, 2, 3}


def test_conflicting_writes_on_two_nodes_fail_at_commit(cluster: GaleraCluster) -> None:
    """Optimistic replication: both transactions hold "their" row lock on their own node; the
    first to commit wins and the other gets a deadlock error at COMMIT (certification)."""
    node1, _, node3 = cluster.nodes
    setup = connect(node1)
    setup.cursor().execute("INSERT INTO d.t (node) VALUES (1)")
    row = setup.insert_id()
    setup.close()
    wait_for(lambda: node3.query("SELECT id FROM d.t WHERE id = %s", (row,)) != [])
    first, second = connect(node1), connect(node3)
    first.autocommit(False)
    second.autocommit(False)
    first.cursor().execute("UPDATE d.t SET v = 1 WHERE id = %s", (row,))
    second.cursor().execute("UPDATE d.t SET v = 3 WHERE id = %s", (row,))
    first.commit()
    with pytest.raises(MySQLdb.OperationalError) as conflict:
        second.commit()
    assert conflict.value.args[0] == 1213  # ER_LOCK_DEADLOCK
    first.close()
    second.close()
    assert node3.query("SELECT v FROM d.t WHERE id = %s", (row,)) == [{"v": 1}]


def test_get_lock_is_one_nodes_lock(cluster: GaleraCluster) -> None:
    """GET_LOCK works on a Galera node (MariaDB 10.11) but is not replicated: two sessions on
    different nodes both get the same lock. A lock that must exclude processes everywhere (the
    cleaner's) needs every process on the same node, or a lock row instead."""
    node1, _, node3 = cluster.nodes
    holder, same_node, other_node = connect(node1), connect(node1), connect(node3)
    try:

        def get_lock(connection: Any) -> int:
            cursor = connection.cursor()
            cursor.execute("SELECT GET_LOCK('schemaless-test', 0)")
            return int(cursor.fetchone()[0])

        assert get_lock(holder) == 1
        assert get_lock(same_node) == 0
        assert get_lock(other_node) == 1
    finally:
        for connection in (holder, same_node, other_node):
            connection.close()


def test_killed_node_writes_go_on_and_it_rejoins_with_every_write(
    cluster: GaleraCluster,
) -> None:
    node1, node2, node3 = cluster.nodes
    before = count_rows(node1)
    done = threading.Event()
    written = {1: 0, 3: 0}
    slowest = {1: 0.0, 3: 0.0}
    errors: list[str] = []

    def write(node: GaleraNode, number: int) -> None:
        connection = connect(node)
        cursor = connection.cursor()
        while not done.is_set():
            started = time.monotonic()
            try:
                cursor.execute("INSERT INTO d.t (node) VALUES (%s)", (number,))
                written[number] += 1
                slowest[number] = max(slowest[number], time.monotonic() - started)
            except MySQLdb.Error as error:  # pragma: no cover - reported below
                errors.append(f"node{number}: {error}")
            time.sleep(0.01)
        connection.close()

    writers = [
        threading.Thread(target=write, args=(node1, 1)),
        threading.Thread(target=write, args=(node3, 3)),
    ]
    for writer in writers:
        writer.start()
    try:
        wait_for(lambda: written[1] > 10 and written[3] > 10)
        node2.kill()
        assert node2.state() == "down"
        # The survivors see the node gone (after evs.suspect_timeout) and keep a quorum of 2.
        cluster.wait_synced(timeout=60, size=2)
        at_kill = dict(written)
        wait_for(lambda: written[1] > at_kill[1] + 10 and written[3] > at_kill[3] + 10)
        restarted = time.monotonic()
        node2.restart()
        print(f"node2 rejoined in {time.monotonic() - restarted:.1f}s")
        at_restart = dict(written)
        wait_for(lambda: written[1] > at_restart[1] + 10 and written[3] > at_restart[3] + 10)
    finally:
        done.set()
        for writer in writers:
            writer.join()
    # The survivors' commits wait for the killed node until it is suspected (about 4 s).
    print(f"slowest write on node1 {slowest[1]:.1f}s, on node3 {slowest[3]:.1f}s")
    assert errors == []
    # The writes it missed came by IST from a donor's gcache, not a whole new copy.
    assert node2.last_state_transfer() == "IST"
    expected = before + written[1] + written[3]
    assert [count_rows(node) for node in cluster.nodes] == [expected] * 3
    assert [node.state() for node in cluster.nodes] == ["Synced"] * 3
