"""A shard that is a 3-node Galera cluster (issue 19, docs/replicas.md "Galera"): the store
reaches it through ``galera://`` (``schemaless_store.backends.galera``: the first synced node of
a list). Writer processes create, update, delete, claim unique values and put cells on a store
whose third shard is the cluster; the node they all write through is SIGKILLed mid-write.
Writes go on through the next node within a bounded time, no acknowledged write is lost, the
killed node rejoins with every row, and after one cleaner pass the index tables are exact and
every query finds what it should."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from schemaless_store.testing.galera import GaleraNode
from tests.support import child
from tests.support.galera import LAYOUT, GaleraHome, rows_on, whole_cluster
from tests.support.grown import GrownStore, checked_census

pytestmark = [pytest.mark.mariadb_only, pytest.mark.slow]

WRITE_SECONDS = 14
KILL_AFTER = 4


cluster = whole_cluster()


def test_writes_go_on_through_the_next_node_when_one_dies(cluster, tmp_path: Path):
    from django.conf import settings

    assert settings.BACKEND == "mariadb"
    store = GrownStore(tmp_path, GaleraHome(cluster), layout=LAYOUT)
    try:
        acks = [tmp_path / f"acks{n}.jsonl" for n in range(2)]
        writers = [
            store.spawn(
                "tests.support.grown",
                "writer",
                str(n),
                f"{n:02x}",
                str(WRITE_SECONDS),
                str(path),
                stderr=subprocess.PIPE,
            )
            for n, path in enumerate(acks)
        ]
        time.sleep(KILL_AFTER)
        before = sum(len(path.read_text().splitlines()) for path in acks)
        killed_at = time.monotonic()
        cluster.nodes[0].kill()  # the first node of the list: every process writes through it
        errors = [writer.communicate(timeout=120)[1] for writer in writers]
        assert all(writer.returncode == 0 for writer in writers), errors
        after = sum(len(path.read_text().splitlines()) for path in acks)
        # Writes went on after the kill (the writers ran WRITE_SECONDS - KILL_AFTER more).
        assert after > before + 20, (before, after)
        failed = sum(text.count("a write failed") for text in errors)
        assert failed <= 4, errors  # the writes in flight at the kill, at most a few each
        assert time.monotonic() - killed_at < 60

        database = store.names[-1][1]
        cluster.nodes[0].restart()  # rejoins (IST) with what it missed
        cluster.wait_synced(size=3)
        counts = {node.name: rows_on(node, database) for node in cluster.nodes}
        assert len(set(counts.values())) == 1 and min(counts.values()) > 0, counts

        census = checked_census(store, acks)
        assert "shard_2" in {a for aliases in census["placed"].values() for a in aliases}
    finally:
        store.close()


def test_writes_through_two_nodes_meet_at_certification_and_are_retried(cluster, tmp_path):
    """Two processes save the same entities, one through the first node, one through the last:
    Galera fails the later of two conflicting commits (error 1213) and the store retries it as
    a deadlock; every save returns, and with no cleaner pass the index tables are exact and
    the entities end in one writer's last state."""
    from schemaless_store.values import bucket_hash

    store = GrownStore(tmp_path, GaleraHome(cluster), layout=LAYOUT)
    try:
        ids = []
        while len(ids) < 20:  # entities on the cluster's buckets
            candidate = uuid.uuid4()
            if bucket_hash.bucket_of(candidate.bytes, 4096) >= 2048:
                ids.append(candidate.hex)
        rivals = []
        for tag, order in (("a", 1), ("b", -1)):
            databases = json.loads(json.dumps(store.databases, default=str))
            nodes = databases["shard_2"]["OPTIONS"]["nodes"]
            databases["shard_2"]["OPTIONS"]["nodes"] = nodes[::order]
            env = {**store.env(), "SCHEMALESS_TEST_DATABASES": json.dumps(databases)}
            rivals.append(
                subprocess.Popen(
                    [sys.executable, "-m", "tests.support.grown", "rival", ",".join(ids), "6", tag],
                    cwd=child.ROOT,
                    env=env,
                    text=True,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
            )
        outputs = [rival.communicate(timeout=120) for rival in rivals]
        assert all(rival.returncode == 0 for rival in rivals), [err[-2000:] for _, err in outputs]
        saves = [int(out.strip()) for out, _ in outputs]
        assert min(saves) > 50, saves
        conflicts = sum(
            int(node.status("wsrep_local_cert_failures")["wsrep_local_cert_failures"])
            + int(node.status("wsrep_local_bf_aborts")["wsrep_local_bf_aborts"])
            for node in cluster.running()
        )
        assert conflicts > 0  # the two really conflicted, and nothing reached the callers
        # No cleaner pass: Galera's row locks are per node, so a write's step 5 on one node
        # could remove a row another node's write had just added; its certified re-check
        # (docs/design.md#galera) puts such a row back before the write returns.
        census = store.census()
        assert census["inexact"] is None, census["inexact"]
        assert census["queries"] is None, census["queries"]
        for key in ids:
            assert census["entities"][key]["by"] in ("a", "b")
    finally:
        store.close()


def _cluster_ids(count: int) -> list[str]:
    """Ids of entities on the cluster's buckets: few, so rivals collide."""
    from schemaless_store.values import bucket_hash

    ids: list[str] = []
    while len(ids) < count:
        candidate = uuid.uuid4()
        if bucket_hash.bucket_of(candidate.bytes, 4096) >= 2048:
            ids.append(candidate.hex)
    return ids


def _through_each_end(store: GrownStore, args: list[str], env: dict[str, str]) -> list[str]:
    """Run ``python -m tests.support.galera_rivals ARGS TAG`` twice at once, ``a`` through the
    cluster's first node and ``b`` through its last; their last lines of output."""
    rivals = []
    for tag, order in (("a", 1), ("b", -1)):
        databases = json.loads(json.dumps(store.databases, default=str))
        nodes = databases["shard_2"]["OPTIONS"]["nodes"]
        databases["shard_2"]["OPTIONS"]["nodes"] = nodes[::order]
        rivals.append(
            subprocess.Popen(
                [sys.executable, "-m", "tests.support.galera_rivals", *args, tag],
                cwd=child.ROOT,
                env={**store.env(), **env, "SCHEMALESS_TEST_DATABASES": json.dumps(databases)},
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        )
    outputs = [rival.communicate(timeout=120) for rival in rivals]
    assert all(rival.returncode == 0 for rival in rivals), [err[-2000:] for _, err in outputs]
    return [out.strip().splitlines()[-1] for out, _ in outputs]


def test_a_partial_update_and_a_modify_through_two_nodes_keep_every_version(cluster, tmp_path):
    """The 30-minute Galera soak's lost write (docs/reliability.md, seed 4912): a ``modify``
    acknowledged with the version it read, and a concurrent partial update whose version
    followed that same one, as if both had committed on it. Here the two run through two
    nodes on a few entities that keep every version (``HISTORY``): each acknowledged value
    is one version of its entity's history, and a ``modify``'s version follows the one it
    read (a commit built on a version another commit replaced fails certification)."""
    store = GrownStore(tmp_path, GaleraHome(cluster), layout=LAYOUT)
    env = {"SCHEMALESS_TEST_HISTORY": "1"}
    try:
        ids = _cluster_ids(3)
        before = _conflicts(cluster)
        outputs = _through_each_end(store, ["registers", ",".join(ids), "6"], env)
        assert _conflicts(cluster) > before  # the two really conflicted
        done = subprocess.run(
            [sys.executable, "-m", "tests.support.galera_rivals", "histories", ",".join(ids)],
            cwd=child.ROOT,
            env={**store.env(), **env},
            text=True,
            capture_output=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        histories = json.loads(done.stdout.strip().splitlines()[-1])
        for key in ids:
            versions = histories[key]
            acked = [tuple(ack) for out in outputs for ack in json.loads(out)[key]]
            assert len(acked) > 10, key
            assert sorted(versions) == sorted(["first", *(value for value, _ in acked)]), key
            after = dict(zip(versions[1:], versions, strict=False))
            assert {v: (p, after[v]) for v, p in acked if p is not None and after[v] != p} == {}
    finally:
        store.close()


def test_appends_through_two_nodes_are_each_applied_once_at_certification(cluster, tmp_path):
    """Two processes append unique values to the same few entities (``modify``), one through
    the first node, one through the last: each save sends its ``UPDATE`` with the receipt and
    the ``COMMIT`` in one query, and the later of two conflicting commits fails certification
    there (error 1213 inside the query). Every acknowledged value is in its entity once, and
    nothing else is: no commit was half applied, lost or applied twice."""
    from schemaless_store.values import bucket_hash

    store = GrownStore(tmp_path, GaleraHome(cluster), layout=LAYOUT)
    try:
        ids = []
        while len(ids) < 4:  # entities on the cluster's buckets: few, so the rivals collide
            candidate = uuid.uuid4()
            if bucket_hash.bucket_of(candidate.bytes, 4096) >= 2048:
                ids.append(candidate.hex)
        before = _conflicts(cluster)
        rivals = []
        for tag, order in (("a", 1), ("b", -1)):
            databases = json.loads(json.dumps(store.databases, default=str))
            nodes = databases["shard_2"]["OPTIONS"]["nodes"]
            databases["shard_2"]["OPTIONS"]["nodes"] = nodes[::order]
            env = {**store.env(), "SCHEMALESS_TEST_DATABASES": json.dumps(databases)}
            command = [sys.executable, "-m", "tests.support.galera_rivals", ",".join(ids), "6", tag]
            rivals.append(
                subprocess.Popen(
                    command,
                    cwd=child.ROOT,
                    env=env,
                    text=True,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
            )
        outputs = [rival.communicate(timeout=120) for rival in rivals]
        assert all(rival.returncode == 0 for rival in rivals), [err[-2000:] for _, err in outputs]
        acknowledged: dict[str, list[str]] = {key: [] for key in ids}
        for out, _ in outputs:
            for key, values in json.loads(out.strip().splitlines()[-1]).items():
                acknowledged[key].extend(values)
        assert min(len(values) for values in acknowledged.values()) > 10, acknowledged
        assert _conflicts(cluster) > before  # the two really conflicted
        census = store.census()
        for key in ids:
            items = census["entities"][key]["items"]
            assert len(items) == len(set(items)), key  # none applied twice
            assert set(items) == set(acknowledged[key]), key  # none lost, none extra
    finally:
        store.close()


def _conflicts(cluster: Any) -> int:
    return sum(
        int(node.status("wsrep_local_cert_failures")["wsrep_local_cert_failures"])
        + int(node.status("wsrep_local_bf_aborts")["wsrep_local_bf_aborts"])
        for node in cluster.running()
    )


def test_a_lost_commit_answer_is_decided_by_the_receipt_on_galera(cluster, tmp_path: Path):
    """Issue 34 on a Galera shard: an update's commit lands, another client deletes the
    entity, then the answer is lost. The retry reads the receipt (with ``wsrep_sync_wait``:
    docs/design.md#receipts) and does not write the entity back; the session's own
    ``wsrep_sync_wait`` (1 here, as a deployment's ``init_command`` sets it) is left as it was:
    the read once set it to 0 on the shared connection, and a 30-minute Galera soak then read
    a commit's writes missing through another node (docs/reliability.md). A removal of
    receipts there raises the pruned line and removes them (Galera's route: an ``atomic()``
    block)."""
    from schemaless_store.values import bucket_hash

    store = GrownStore(tmp_path, GaleraHome(cluster), layout=LAYOUT)
    try:
        key = uuid.uuid4()
        while bucket_hash.bucket_of(key.bytes, 4096) < 2048:  # on the cluster
            key = uuid.uuid4()
        done = store.run("tests.support.grown", "lostanswer", key.hex, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        found = json.loads(done.stdout.strip().splitlines()[-1])
        assert found.pop("removed") >= 3  # the create's, the lost save's, the delete's
        assert found == {
            "lost": 1,
            "galera": True,
            "shard": "shard_2",
            "left": None,
            "sync_wait": 1,
            "line_rose": True,
        }
    finally:
        store.close()


def test_autocommit_statements_in_one_query_report_their_certification_failures(cluster):
    """What the index writer relies on (docs/design.md#galera): its rows go in multi-statement
    queries in autocommit, each statement a transaction of its own; through two nodes at once,
    one that fails certification must raise, never answer success (a ``COMMIT`` inside such a
    query may: ``test_appends_through_two_nodes_are_each_applied_once_at_certification``). Two
    clients increment the same counters through the first and
    the last node, two autocommit ``UPDATE`` statements per query; every increment they were
    told succeeded is in the counters, and no other."""
    import threading

    import MySQLdb
    from MySQLdb.constants import CLIENT

    first = cluster.nodes[0]
    first.query("CREATE DATABASE IF NOT EXISTS multi_probe")
    first.query("DROP TABLE IF EXISTS multi_probe.c")
    first.query("CREATE TABLE multi_probe.c (id INT PRIMARY KEY, n INT NOT NULL)")
    first.query("INSERT INTO multi_probe.c VALUES (1, 0), (2, 0), (3, 0), (4, 0)")
    cluster.wait_synced(size=3)
    # Synced is not applied: a node can be Synced while its applier is still behind on the
    # CREATE DATABASE (CI met "Unknown database" once). Each node shows the rows first.
    for node in cluster.nodes:
        probe = node.connect()
        try:
            with probe.cursor() as cursor:
                cursor.execute("SET SESSION wsrep_sync_wait = 1")
                cursor.execute("SELECT COUNT(*) FROM multi_probe.c")
                assert cursor.fetchone()[0] == 4, node.name
        finally:
            probe.close()
    acknowledged = dict.fromkeys((1, 2, 3, 4), 0)
    counted = threading.Lock()
    crashed: list[BaseException] = []  # a client thread's own failure, not a server's answer

    def client(node: GaleraNode, order: int) -> None:
        try:
            increments(node, order)
        except BaseException as exc:
            crashed.append(exc)

    def increments(node: GaleraNode, order: int) -> None:
        conn = MySQLdb.connect(
            host="127.0.0.1",
            port=node.port,
            user="root",
            db="multi_probe",
            client_flag=CLIENT.MULTI_STATEMENTS,
        )
        conn.autocommit(True)
        keys = [1, 2, 3, 4][::order]
        deadline = time.monotonic() + 4
        try:
            while time.monotonic() < deadline:
                for pair in (keys[:2], keys[2:]):
                    done = []
                    cursor = conn.cursor()
                    try:
                        cursor.execute(
                            ";".join(f"UPDATE c SET n = n + 1 WHERE id = {k}" for k in pair)
                        )
                        done.append(pair[0])
                        while cursor.nextset():  # the second statement's error raises here
                            pass
                        done.append(pair[1])
                    except MySQLdb.OperationalError:
                        pass  # a certification failure, reported: not counted
                    finally:
                        cursor.close()
                    with counted:
                        for key in done:
                            acknowledged[key] += 1
        finally:
            conn.close()

    before = _conflicts(cluster)
    clients = [
        threading.Thread(target=client, args=(cluster.nodes[0], 1)),
        threading.Thread(target=client, args=(cluster.nodes[-1], -1)),
    ]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join()
    assert crashed == []
    cluster.wait_synced(size=3)
    assert _conflicts(cluster) > before  # they really met at certification
    reader = first.connect(database="multi_probe")
    try:
        with reader.cursor() as cursor:
            cursor.execute("SET SESSION wsrep_sync_wait = 1")  # every write set applied first
            cursor.execute("SELECT id, n FROM c")
            stored = dict(cursor.fetchall())
    finally:
        reader.close()
    assert stored == acknowledged
    assert min(stored.values()) > 100
    first.query("DROP DATABASE multi_probe")
