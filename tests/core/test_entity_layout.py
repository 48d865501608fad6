"""The layout of ``entities`` (docs/design.md#the-entities-table): a new MySQL store's is
clustered by id, so that a page reaches each entity with one primary-key descent; the seed
layout (clustered by ``added_id``) still serves reads, writes, queries and moves; migrate
converts a small table itself, ``clusterentities`` converts a big one online, losing no write
and holding writers up only briefly."""

from __future__ import annotations

import contextlib
import io
import json
import threading
import time
import types
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections

from schemaless_store import checks
from schemaless_store.cleaner import Cleaner
from schemaless_store.config.indexes import registry
from schemaless_store.models import Entity
from schemaless_store.sql import layout
from schemaless_store.tables import clustering, scans
from schemaless_store.topology import bucket_map, shards
from tests.support import STORE, buckets
from tests.support.invariants import (
    assert_exact,
    check_no_false_negatives,
    check_no_false_positives,
)

pytestmark = STORE

CLUSTERED_KEYS = {
    "PRIMARY": (True, ("id",)),
    layout.ADDED_ID_KEY: (True, ("added_id",)),
    layout.UPDATED_KEY: (False, ("updated", "added_id")),
}


def keys_of(alias: str) -> dict[str, tuple[bool, tuple[str, ...]]]:
    with connections[alias].cursor() as cursor:
        return layout.keys(cursor)


def to_seed(alias: str) -> None:
    with connections[alias].cursor() as cursor:
        cursor.execute(layout.to_seed(cursor, 5))


@contextlib.contextmanager
def seed_layout(*aliases: str) -> Iterator[None]:
    """``aliases``' entities in the seed layout (``PRIMARY KEY (added_id)``) for the block."""
    for alias in aliases:
        to_seed(alias)
        assert layout.clustered_by(connections[alias]) == layout.SEED
    try:
        yield
    finally:
        for alias in aliases:
            clustering.cluster(alias)


def test_a_new_store_clusters_entities_by_id_on_mysql_and_keeps_sqlite_a_rowid_table(backend):
    for alias in shards.shard_aliases():
        conn = connections[alias]
        if backend == "sqlite":
            assert layout.clustered_by(conn) == layout.SEED
            continue
        assert layout.clustered_by(conn) == layout.CLUSTERED
        assert keys_of(alias) == CLUSTERED_KEYS
        with conn.cursor() as cursor:
            cursor.execute("SHOW CREATE TABLE entities")
            assert "AUTO_INCREMENT" in cursor.fetchone()[1]
    assert clustering.seed_layout_shards() == []


def _explain_page(alias: str) -> dict:
    conn = connections[alias]
    index = registry.get("index_user_published")
    sql = scans.scan_sql(
        conn.vendor, conn.ops.quote_name, index, [("user_id", "exact", b"u")], [1], True, True
    )
    with conn.cursor() as cursor:
        cursor.execute(
            f"EXPLAIN FORMAT=JSON {sql.select} WHERE {sql.where[0]} ORDER BY {sql.order} LIMIT 30",
            [b"u"],
        )
        return json.loads(cursor.fetchone()[0])


def _entities_access(plan: dict) -> dict:
    tables = [t["table"] for t in plan["query_block"]["nested_loop"]]
    return next(t for t in tables if t["table_name"] == "e")


@pytest.mark.mariadb_only
def test_a_page_reaches_each_entity_by_the_primary_key_and_the_seed_layout_by_unique_id():
    alias = shards.shard_aliases()[0]
    # eq_ref on PRIMARY: one descent of the clustered B-tree per index row.
    access = _entities_access(_explain_page(alias))
    assert (access["access_type"], access["key"]) == ("eq_ref", "PRIMARY")
    with seed_layout(alias):
        # eq_ref on UNIQUE (id): a descent of that index, then one of the primary key (added_id)
        # to read the body: the descent the new layout saves.
        access = _entities_access(_explain_page(alias))
        assert (access["access_type"], access["key"]) == ("eq_ref", layout.SEED_ID_KEY)
    assert keys_of(alias) == CLUSTERED_KEYS


def _exercise(made: dict[uuid.UUID, dict]) -> None:
    """Writes of every kind and the reads that check them, on whatever layouts the shards have."""
    for n in range(40):
        props = {"user_id": bytes([n % 4]) * 16, "published": n, "title": f"t{n}"}
        entity = (
            Entity.objects.create(placed_with="user_id", **props)
            if n % 2
            else Entity.objects.create(**props)
        )
        made[entity.id] = props
    put = [{"user_id": b"\x09" * 16, "published": 100 + n, "title": f"b{n}"} for n in range(30)]
    for entity, props in zip(Entity.objects.bulk_put(put), put, strict=True):
        made[entity.id] = props
    for entity_id in list(made)[:10]:
        entity = Entity.objects.get(id=entity_id)
        entity["title"] += "!"
        entity.save(if_unchanged=True)
        made[entity_id]["title"] += "!"
    for entity_id in list(made)[10:15]:
        Entity.objects.get(id=entity_id).delete()
        del made[entity_id]
    check(made)


def check(made: dict[uuid.UUID, dict]) -> None:
    found = Entity.objects.get_many(list(made))
    assert {i: e.body_properties() for i, e in found.items()} == made
    for user in {p["user_id"] for p in made.values()}:
        mine = sorted((p["published"], i) for i, p in made.items() if p["user_id"] == user)[::-1]
        page = Entity.objects.filter_index(user_id=user).order_by("-published")[:30]
        assert [e.id for e in page] == [i for _p, i in mine[:30]]
    assert sum(1 for _ in Entity.objects.all()) == len(made)
    assert_exact()
    check_no_false_positives([{"user_id": user} for user in {p["user_id"] for p in made.values()}])
    check_no_false_negatives()


@pytest.mark.mariadb_only
def test_a_seed_layout_shard_serves_writes_reads_the_cleaner_and_moves_both_ways():
    seeded = shards.shard_aliases()[0]
    made: dict[uuid.UUID, dict] = {}
    with buckets.restored_afterwards(), seed_layout(seeded):
        _exercise(made)
        # The cleaner's walks (by added_id, newest updated first) repair what was lost.
        with connections[seeded].cursor() as cursor:
            cursor.execute("DELETE FROM index_user_published LIMIT 5")
            assert cursor.rowcount == 5
        Cleaner(once=True, batch_size=7).run()
        check(made)
        owner = bucket_map.current().owners[0]
        for target in (buckets.other_alias(owner), owner):
            out = io.StringIO()
            call_command("movebuckets", "--to", target, "--buckets", "0-299", stdout=out)
            assert "done:" in out.getvalue()
            bucket_map.forget()
            check(made)
        assert layout.clustered_by(connections[seeded]) == layout.SEED
    assert layout.clustered_by(connections[seeded]) == layout.CLUSTERED
    check(made)


@pytest.mark.mariadb_only
def test_migrate_converts_a_small_table_and_the_check_names_the_command_for_a_big_one(
    monkeypatch,
):
    owners = bucket_map.current().owners
    small = owners[0]
    big = buckets.other_alias(small)
    bucket_of_big = owners.index(big)
    monkeypatch.setattr(clustering, "AT_MIGRATE_MAX_ROWS", 5)
    made: dict[uuid.UUID, dict] = {}
    for n in range(12):
        entity_id = buckets.id_in_bucket(0 if n < 3 else bucket_of_big)
        props = {"title": f"t{n}"}
        Entity.objects.create(id=entity_id, **props)
        made[entity_id] = props
    assert layout.rows_up_to(connections[small], 5) == 3
    assert layout.rows_up_to(connections[big], 5) == 6  # counted up to the bound only
    with seed_layout(small, big):
        assert checks.check_entities_layout(databases=["default"]) == []
        warned = checks.check_entities_layout(databases=[small, big])
        assert [w.id for w in warned] == ["schemaless.W006"] * 2
        for alias in (small, big):
            clustering.migrate_forwards(None, types.SimpleNamespace(connection=connections[alias]))
        assert layout.clustered_by(connections[small]) == layout.CLUSTERED
        assert layout.clustered_by(connections[big]) == layout.SEED  # left to the command
        (warning,) = checks.check_entities_layout(databases=[small, big])
        assert repr(big) in warning.msg
        assert f"manage.py clusterentities --database {big}" in warning.hint
        out = io.StringIO()
        call_command("clusterentities", "--dry-run", stdout=out)
        assert f"{big}: would cluster entities by id (a big table)." in out.getvalue()
        assert layout.clustered_by(connections[big]) == layout.SEED
        call_command("clusterentities", stdout=out)
        assert f"{small}: entities is clustered by id already." in out.getvalue()
        assert f"{big}: entities clustered by id in" in out.getvalue()
        assert checks.check_entities_layout(databases=[small, big]) == []
        assert keys_of(big) == CLUSTERED_KEYS
    found = Entity.objects.get_many(list(made))
    assert {i: e.body_properties() for i, e in found.items()} == made


@pytest.mark.mariadb_only
def test_the_alter_gives_up_on_a_held_metadata_lock_and_tries_again():
    alias = shards.shard_aliases()[0]
    said: list[str] = []
    with seed_layout(alias):
        holding = threading.Event()

        def hold() -> None:
            holder = connections.create_connection(alias)
            with holder.cursor() as cursor:
                cursor.execute("START TRANSACTION")
                cursor.execute("SELECT COUNT(*) FROM entities")  # a shared metadata lock
                holding.set()
                time.sleep(2.5)
                cursor.execute("COMMIT")
            holder.close()

        thread = threading.Thread(target=hold)
        thread.start()
        assert holding.wait(30)
        took = clustering.cluster(alias, wait=1, attempts=10, say=said.append)
        thread.join()
        assert took is not None
        assert said and "metadata lock" in said[0]
        assert layout.clustered_by(connections[alias]) == layout.CLUSTERED


@pytest.mark.mariadb_only
@pytest.mark.slow
def test_the_online_conversion_loses_no_write_and_holds_writers_up_briefly():
    alias = shards.shard_aliases()[0]
    rows = 60_000  # enough for an ALTER that lasts many write round trips
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "INSERT INTO entities (id, updated, body) SELECT RANDOM_BYTES(16), NOW(6), "
            f"RANDOM_BYTES(400) FROM seq_1_to_{rows}"
        )
    acked: dict[uuid.UUID, int] = {}
    ops: list[tuple[float, float]] = []  # (began, ended) of each write and read
    stop = threading.Event()
    errors: list[BaseException] = []

    def timed(op: Callable[..., Any], *args: object, **kwargs: object) -> Any:
        began = time.perf_counter()
        result = op(*args, **kwargs)
        ops.append((began, time.perf_counter()))
        return result

    def writer(number: int) -> None:
        try:
            n = 0
            while not stop.is_set():
                entity_id = buckets.id_in_bucket(number)  # a bucket of this shard's
                timed(Entity.objects.create, id=entity_id, n=n)
                entity = timed(Entity.objects.get, id=entity_id)
                entity["n"] = n + 1
                timed(entity.save)
                acked[entity_id] = n + 1
                n += 1
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    with seed_layout(alias):
        owned = bucket_map.current().buckets_of(alias)[:2]
        threads = [threading.Thread(target=writer, args=(b,)) for b in owned]
        for thread in threads:
            thread.start()
        time.sleep(0.5)
        began = time.perf_counter()
        took = clustering.cluster(alias)
        ended = time.perf_counter()
        time.sleep(0.3)
        stop.set()
        for thread in threads:
            thread.join()
    assert not errors, errors
    assert took is not None and layout.clustered_by(connections[alias]) == layout.CLUSTERED
    quarter = (ended - began) / 4
    # Operations that ran, start to finish, in the middle half of the ALTER: it locked no one
    # out (with LOCK=EXCLUSIVE there are none).
    within = [w for w in ops if began + quarter <= w[0] and w[1] <= ended - quarter]
    overlapping = [e - b for b, e in ops if b < ended and e > began]
    slowest = max(overlapping)
    print(
        f"\n{rows:,} rows clustered in {took:.2f} s ({took / rows * 100_000:.1f} s per 100k); "
        f"{len(overlapping)} writes and reads overlapped it, {len(within)} inside its middle half; "
        f"the slowest of them took {slowest * 1000:.0f} ms"
    )
    assert within
    assert slowest < max(2.0, (ended - began) / 2)
    found = Entity.objects.get_many(list(acked))
    assert {i: e["n"] for i, e in found.items()} == acked
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM entities")
        assert cursor.fetchone()[0] == rows + len(acked)


def test_clusterentities_refuses_an_unknown_shard_and_a_shard_with_no_table_changing_nothing():
    with pytest.raises(CommandError, match=r"^not a shard: nope$"):
        call_command("clusterentities", "--database", "shard_0", "--database", "nope")
    if connections["shard_1"].vendor != "mysql":
        return  # SQLite keeps its one layout: there is no table to look for
    with connections["shard_1"].cursor() as cursor:
        cursor.execute("RENAME TABLE entities TO entities_away")
    try:
        with pytest.raises(CommandError, match="shard_1 has no entities table: run migrate"):
            call_command("clusterentities", stdout=io.StringIO())
    finally:
        with connections["shard_1"].cursor() as cursor:
            cursor.execute("RENAME TABLE entities_away TO entities")
    assert clustering.seed_layout_shards() == []
