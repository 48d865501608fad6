"""A shard that is a 3-node Galera cluster (docs/replicas.md "Galera"), under the store's own
background work: a move's fence whose node in use is SIGKILLed loses no acknowledged write, a
fence ends the store's sessions on every node, step 5's re-check of a stale row holds across
nodes, and ``clusterentities`` converts a Galera shard only when told."""

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
from tests.support.galera import LAYOUT, GaleraHome, whole_cluster
from tests.support.grown import GrownStore, checked_census

pytestmark = [pytest.mark.mariadb_only, pytest.mark.slow]

cluster = whole_cluster()


def test_a_failover_at_a_moves_fence_loses_no_acknowledged_write(cluster, tmp_path: Path):
    """Buckets move off the cluster while writers write to them; as the mover's fence begins,
    the node every process uses is SIGKILLed. The writers fail over to the next node, and the
    mover reconnects and resumes within its run, or stops and the same command run again
    fences on the nodes that are left (the dead one cannot commit: the cluster's primary
    component no longer counts it) and finishes the move. Every acknowledged write is there,
    on its owner, and the index tables are exact (docs/design.md#the-fence)."""
    store = GrownStore(tmp_path, GaleraHome(cluster), layout=LAYOUT)
    try:
        acks = [tmp_path / f"acks{n}.jsonl" for n in range(2)]
        writers = [
            store.spawn("tests.support.grown", "writer", str(n), f"{n:02x}", "16", str(path))
            for n, path in enumerate(acks)
        ]
        time.sleep(3)
        move = ("movebuckets", "--to", "shard_0", "--buckets", "2048-2559", "--batch", "50")
        mover = store.spawn(
            "tests.support.grown",
            "nodekillingmover",
            str(cluster.nodes[0].process.pid),
            *move,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        _out, err = mover.communicate(timeout=180)
        assert "killed the node at the fence" in err, err[-3000:]
        finished = store.manage(*move, check=False)
        if finished.returncode != 0:  # the killed node may still count for a moment
            time.sleep(5)
            finished = store.manage(*move)
        # The killed mover may have finished the move itself: movebuckets reconnects and
        # resumes within its run (docs/resharding.md); then the second run has nothing to do.
        assert "now on shard_0" in finished.stdout or "are on shard_0 already" in finished.stdout, (
            finished.stdout,
            finished.stderr,
        )
        errors = [writer.communicate(timeout=120)[1] for writer in writers]
        assert all(writer.returncode == 0 for writer in writers), errors
        cluster.nodes[0].restart()
        cluster.wait_synced(size=3)
        census = checked_census(store, acks)
        moved = {k for k, owner in census["owners"].items() if owner == "shard_0"}
        assert moved, "no written entity was in the moved buckets"
    finally:
        store.close()


def test_a_fence_ends_the_stores_sessions_on_every_node(cluster, tmp_path: Path):
    """A session of the store on any node may hold a snapshot that serves the buckets: the
    fence, run through one node, ends them on all three (docs/design.md#the-fence)."""
    store = GrownStore(tmp_path, GaleraHome(cluster), layout=LAYOUT)
    try:
        done = store.run("tests.support.grown", "fenceeverynode", "2048-2051")
        assert done.returncode == 0, done.stderr[-3000:]
        found = json.loads(done.stdout.strip().splitlines()[-1])
        assert len(found["nodes"]) == 3
        assert found["alive"] == [], found
    finally:
        store.close()


def test_a_stale_row_removed_through_one_node_while_another_puts_it_back_is_restored(
    cluster, tmp_path: Path
):
    """The race of step 5 on Galera, in a fixed order: one writer (through the last node)
    changes an entity's user_id from a to b and is held in step 5 right after its locked read
    found the row of a stale; another writer, through the first node, whose row locks do not
    see the first one's, puts user_id a back and returns. The held writer then deletes the row
    of a. Its certified re-check (docs/design.md#galera) puts the row back before it returns:
    the index tables are exact with no cleaner pass."""
    from schemaless_store.values import bucket_hash

    store = GrownStore(tmp_path, GaleraHome(cluster), layout=LAYOUT)
    try:
        key = uuid.uuid4()
        while bucket_hash.bucket_of(key.bytes, 4096) < 2048:  # on the cluster
            key = uuid.uuid4()
        sync = tmp_path / "sync"
        sync.mkdir()

        def through(order: int, role: str) -> subprocess.Popen[str]:
            databases = json.loads(json.dumps(store.databases, default=str))
            nodes = databases["shard_2"]["OPTIONS"]["nodes"]
            databases["shard_2"]["OPTIONS"]["nodes"] = nodes[::order]
            env = {**store.env(), "SCHEMALESS_TEST_DATABASES": json.dumps(databases)}
            return subprocess.Popen(
                [sys.executable, "-m", "tests.support.grown", "stepfive", role, key.hex, str(sync)],
                cwd=child.ROOT,
                env=env,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )

        seed = through(1, "seed")
        assert seed.wait(timeout=60) == 0, seed.communicate()[1][-2000:]
        holder, writer = through(-1, "holder"), through(1, "writer")
        for process in (writer, holder):
            _out, err = process.communicate(timeout=120)
            assert process.returncode == 0, err[-3000:]
        census = store.census()
        assert census["entities"][key.hex]["user_id"] == "a"
        assert census["inexact"] is None, census["inexact"]
        assert census["queries"] is None, census["queries"]
    finally:
        store.close()


def _primary_key(server: Any, database: str) -> tuple[str, ...]:
    from schemaless_store.sql import layout

    conn = server.connect(database)
    try:
        cursor = conn.cursor()
        if isinstance(server, GaleraNode):
            cursor.execute("SET SESSION wsrep_sync_wait = 1")  # what the cluster certified
        return layout.keys(cursor)["PRIMARY"][1]
    finally:
        conn.close()


def test_clusterentities_converts_a_galera_shard_only_when_told(cluster, tmp_path: Path):
    """On Galera the conversion's ALTER runs in total order and pauses every node's writes to
    ``entities``, so ``clusterentities`` refuses a Galera shard unless given ``--galera``
    (docs/upgrading.md#clustering-entities-by-id); given it, the shard is clustered by id on
    every node, and every acknowledged write is there."""
    from schemaless_store.sql import layout

    store = GrownStore(tmp_path, GaleraHome(cluster), layout=LAYOUT)
    try:
        _home, database = store.names[3]  # shard_2, the cluster
        server_0, database_0 = store.names[1]  # shard_0, a single server
        assert _primary_key(cluster.nodes[0], database) == ("id",)  # a new store's layout
        for server, name in ((cluster.nodes[0], database), (server_0, database_0)):
            conn = server.connect(name)
            try:
                cursor = conn.cursor()
                cursor.execute(layout.to_seed(cursor, 5.0))  # as a store migrated before 0006
            finally:
                conn.close()
        assert _primary_key(cluster.nodes[2], database) == ("added_id",)
        acks = tmp_path / "acks.jsonl"
        wrote = store.run("tests.support.grown", "writer", "7", "c7", "2", str(acks))
        assert wrote.returncode == 0, wrote.stderr[-3000:]

        # Every shard named (the default): the refusal comes before shard_0, listed first, is
        # converted; nothing is.
        refused = store.manage("clusterentities", check=False)
        assert refused.returncode != 0
        assert "shard_2 is a Galera node" in refused.stderr, refused.stderr[-2000:]
        assert "nothing was converted" in refused.stderr
        assert _primary_key(cluster.nodes[1], database) == ("added_id",)
        assert _primary_key(server_0, database_0) == ("added_id",)
        store.manage("clusterentities", "--database", "shard_0")
        assert _primary_key(server_0, database_0) == ("id",)

        store.manage("clusterentities", "--database", "shard_2", "--galera")
        for node in cluster.nodes:
            assert _primary_key(node, database) == ("id",), node.name
        checked_census(store, [acks])
    finally:
        store.close()
