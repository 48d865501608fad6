"""The target's pre-images (tables/pre_images.py): from the flip to the verdict, the target's
triggers record each row's first change as the row was, so a mover resumed after the flip
compares the sources with the target as it was at the flip (issue 43's open hole,
tests/moves/test_move_review.py)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import OperationalError, connections

from schemaless_store.config.metadata import BucketMove
from schemaless_store.exceptions import MoveRefused
from schemaless_store.models import Entity
from schemaless_store.tables import capture_probe, moved_rows, pre_images
from schemaless_store.tables import move_log as capture
from schemaless_store.tables.capture_probe import prove
from schemaless_store.tables.moved_rows import moved_tables
from schemaless_store.topology import bucket_map
from schemaless_store.topology.write_lock import write_lock
from tests.support import STORE, buckets
from tests.support.moving import (
    MOVED,
    MOVED_SET,
    assert_moved_and_exact,
    dies_at,
    populate,
    run,
    source_and_target,
)
from tests.support.raw import own_session

pytestmark = [STORE, pytest.mark.usefixtures("buckets_restored")]


def on(alias: str, title: str) -> Entity:
    """An entity ``alias`` owns."""
    owners = bucket_map.current().owners
    number = next(b for b, owner in enumerate(owners) if owner == alias)
    return Entity.objects.create(id=buckets.id_in_bucket(number), title=title)


def entity_row(alias: str, entity: Entity) -> tuple:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT id, updated, body FROM entities WHERE id = %s", [entity.id.bytes])
        return tuple(bytes(v) if isinstance(v, memoryview) else v for v in cursor.fetchone())


def recorded(alias: str) -> dict[bytes, tuple[bool, tuple]]:
    [table] = [t for t in moved_tables() if t.name == "entities"]
    return {row[0]: (present, row) for present, row in pre_images.read(alias, table, 2)}


def test_the_targets_triggers_record_each_rows_first_change_as_it_was():
    _source, target = source_and_target()
    changed, deleted = on(target, "one"), on(target, "doomed")
    was_changed, was_deleted = entity_row(target, changed), entity_row(target, deleted)
    tables = moved_tables()
    try:
        capture.install(target, tables, pre_images=True)
        for n in range(5):  # at the flip: nothing before it counts
            on(target, f"before the clear {n}")
        assert len(recorded(target)) == 5
        pre_images.clear(target, tables, batch=2)  # three statements of at most two rows
        assert recorded(target) == {}
        changed["title"] = "two"
        changed.save()
        changed["title"] = "three"  # a later change keeps the first one's pre-image
        changed.save()
        deleted.delete()
        created = on(target, "new")
        # The mover's upsert (a replay's statement) of a row with an entry: no conflict (on
        # SQLite the firing statement's conflict clause overrides a trigger's OR IGNORE).
        [table] = [t for t in tables if t.name == "entities"]
        moved_rows.write(target, table, [entity_row(target, changed)])
        found = recorded(target)
        assert found[changed.id.bytes] == (True, was_changed)
        assert found[deleted.id.bytes] == (True, was_deleted)
        assert found[created.id.bytes] == (False, entity_row(target, created))  # absent
        assert len(found) == 3  # read in pages of 2, in key order
        assert not capture.installed(target)  # the target keeps no change log
    finally:
        capture.remove(target, tables)
    assert not pre_images.kept(target, tables)
    changed["title"] = "after the move"
    changed.save()  # no trigger is left


def test_a_pre_image_trigger_that_records_nothing_is_found_by_its_probe_and_recreated():
    """As the sources' triggers: a name proves nothing (``CREATE TRIGGER IF NOT EXISTS``
    passes over a taken one); each pre-image trigger must record its probe row's old row."""
    _source, target = source_and_target()
    on(target, "a row to probe with")
    tables = moved_tables()
    name = capture.trigger_name("entities", "pu")
    conn = connections[target]
    body = "SET @schemaless_decoy = 1" if conn.vendor == "mysql" else "BEGIN SELECT 1; END"
    try:
        capture.install(target, tables, pre_images=True)
        assert prove(target, tables, pre_images=True) == []
        with conn.cursor() as cursor:
            capture.drop_trigger(cursor, name)
            cursor.execute(f"CREATE TRIGGER {name} AFTER UPDATE ON entities FOR EACH ROW {body}")
        assert prove(target, tables, pre_images=True) == [name]
        capture.install(target, tables, pre_images=True)
        assert prove(target, tables, pre_images=True) == []
    finally:
        capture.remove(target, tables)


def test_a_writer_that_changes_the_probed_row_meanwhile_fails_no_trigger(monkeypatch):
    """A writer changes the row the probe sampled before the probe's own statements run
    (CI's Galera test met it: writers incrementing the rows a move's target probed). The
    triggers then record the row as the writer left it, which is right; the probe compared
    it with the row it had sampled, called both triggers broken, recreated them and refused
    the move. The sampled row is now read locked, so the writer waits for the probe's
    rollback (a writer that cannot wait, through another Galera node, aborts the probe)."""
    _source, target = source_and_target()
    on(target, "a row to probe with")
    tables = [t for t in moved_tables() if t.name == "entities"]
    sampled = capture_probe._sample
    writers: list[threading.Thread] = []

    def change(key: bytes) -> None:
        try:
            with write_lock(), connections[target].cursor() as cursor:  # as the store's writers
                cursor.execute("UPDATE entities SET updated = updated + 1 WHERE id = %s", [key])
        finally:
            connections[target].close()

    def sample_then_a_write(alias, table, names, *rest):
        row, here = sampled(alias, table, names, *rest)
        if here and not writers:
            writer = threading.Thread(target=change, args=(bytes(row[names.index("id")]),))
            writers.append(writer)
            writer.start()
            writer.join(timeout=1)  # done at once unless the sampled row is locked
        return row, here

    try:
        capture.install(target, tables, pre_images=True)
        monkeypatch.setattr(capture_probe, "_sample", sample_then_a_write)
        assert prove(target, tables, pre_images=True) == []
        assert writers
    finally:
        for writer in writers:
            writer.join()
        capture.remove(target, tables)


def test_a_probe_a_deadlock_aborted_is_made_again(monkeypatch):
    """On Galera a writer through another node aborts a probe whose row it changes (error
    1213, the locked row's or the probe's own writes); the probe is rolled back anyway, so it
    is made again, and the move goes on."""
    _source, target = source_and_target()
    on(target, "a row to probe with")
    tables = [t for t in moved_tables() if t.name == "entities"]
    probed = capture_probe._probe
    aborted: list[str] = []

    def aborted_once(alias, table, pre_images, *rest):
        if not aborted:
            aborted.append(alias)
            raise OperationalError(1213, "Deadlock found when trying to get lock")
        return probed(alias, table, pre_images, *rest)

    try:
        capture.install(target, tables, pre_images=True)
        monkeypatch.setattr(capture_probe, "_probe", aborted_once)
        assert prove(target, tables, pre_images=True) == []
        assert aborted == [target]
        monkeypatch.setattr(capture_probe, "_probe", lambda *_: 1 / 0)
        with pytest.raises(ZeroDivisionError):  # any other error stops the move
            prove(target, tables, pre_images=True)
    finally:
        capture.remove(target, tables)


def _holding(alias: str) -> Any:
    """A session of its own on ``alias``'s database, in a transaction."""
    holder = own_session(alias)
    holder.query("BEGIN")
    return holder


@pytest.mark.mariadb_only
def test_a_row_another_transaction_holds_is_passed_over_not_waited_for(caplog, monkeypatch):
    """The probe's locked read passes over a row another transaction holds (``SKIP
    LOCKED``) instead of waiting for it (``innodb_lock_wait_timeout``, 50 s, once per
    attempt, while a flip holds writes back); a hostile review found each attempt taking the
    same first row, and the fall back to the definitions saying nothing."""
    _source, target = source_and_target()
    on(target, "one")
    on(target, "two")
    tables = [t for t in moved_tables() if t.name == "entities"]
    sampled, samples = capture_probe._sample, []

    def noting(alias, table, names):
        row, here = sampled(alias, table, names)
        samples.append(bytes(row[names.index("id")]))
        return row, here

    holder = _holding(target)
    try:
        capture.install(target, tables, pre_images=True)
        holder.query("SELECT id, body FROM entities LIMIT 1 FOR UPDATE")  # the probe's first
        [(held,)] = [(bytes(r[0]),) for r in holder.store_result().fetch_row(0)]
        monkeypatch.setattr(capture_probe, "_sample", noting)
        began = time.monotonic()
        assert prove(target, tables, pre_images=True) == []
        assert time.monotonic() - began < 5
        assert samples and held not in samples
        assert "judged by their definitions" not in caplog.text
    finally:
        holder.close()
        capture.remove(target, tables)


@pytest.mark.mariadb_only
def test_a_table_whose_every_row_is_held_is_probed_again_not_with_another_shards_row():
    """Writers hold every row: the probe does not take another shard's row for an empty
    table's (its ``INSERT`` waited on, then collided with, a held row of the same key: here
    the source's stale copy; a review found it); it is made again a moment later, and proves
    the triggers once the rows are free."""
    source, target = source_and_target()
    only = on(target, "the only one")
    tables = [t for t in moved_tables() if t.name == "entities"]
    with connections[source].cursor() as cursor:  # a stale copy of it, as a move leaves
        cursor.execute(
            "INSERT INTO entities (id, updated, body) VALUES (%s, %s, %s)",
            list(entity_row(target, only)),
        )
    holder = _holding(target)
    try:
        capture.install(target, tables, pre_images=True)
        holder.query("SELECT id FROM entities FOR UPDATE")
        holder.store_result()
        threading.Timer(0.05, holder.rollback).start()  # free them while the probe tries
        began = time.monotonic()
        assert prove(target, tables, pre_images=True) == []
        assert time.monotonic() - began < 5
    finally:
        time.sleep(0.1)
        holder.close()
        capture.remove(target, tables)
        with connections[source].cursor() as cursor:
            cursor.execute("DELETE FROM entities WHERE id = %s", [only.id.bytes])


def test_a_missing_pre_image_table_never_fails_a_write():
    if connections["shard_0"].vendor != "mysql":
        pytest.skip("MariaDB's handler; SQLite drops a trigger and its table together")
    _source, target = source_and_target()
    entity = on(target, "before")
    tables = moved_tables()
    try:
        capture.install(target, tables, pre_images=True)
        with connections[target].cursor() as cursor:
            cursor.execute(f"DROP TABLE {pre_images.table_name('entities')}")
        entity["title"] = "after"
        entity.save()  # the trigger fires and its table is gone: the write goes on
        assert Entity.objects.get(id=entity.id)["title"] == "after"
    finally:
        capture.remove(target, tables)


def test_a_mover_resumed_at_the_flip_proves_the_targets_triggers_again(monkeypatch):
    """The mover dies as the flip starts (the target's triggers were made at the end of the
    catch-up); one of them then records nothing. The resumed flip proves them, recreates it,
    and the owner's writes after the flip are recorded, so a mover resumed once more compares
    the copies with the target at the flip."""
    made = populate(20)
    _source, target = source_and_target()
    dies_at(monkeypatch, "flip", "--to", target, "--buckets", MOVED)
    assert BucketMove.objects.get().phase == "fenced"
    name = capture.trigger_name("entities", "pu")
    conn = connections[target]
    body = "SET @schemaless_decoy = 1" if conn.vendor == "mysql" else "BEGIN SELECT 1; END"
    with conn.cursor() as cursor:
        capture.drop_trigger(cursor, name)
        cursor.execute(f"CREATE TRIGGER {name} AFTER UPDATE ON entities FOR EACH ROW {body}")
    dies_at(monkeypatch, "verify", "--to", target, "--buckets", MOVED)
    assert BucketMove.objects.get().phase == "flipped"
    assert prove(target, moved_tables(), pre_images=True) == []
    bucket_map.forget()
    written = next(i for i in made if bucket_map.bucket_for(i.bytes) in MOVED_SET)
    entity = Entity.objects.get(id=written)
    entity["title"] = "written by the new owner"
    entity.save()
    assert written.bytes in recorded(target)
    made[written]["title"] = entity["title"]
    run("--to", target, "--buckets", MOVED)
    move = BucketMove.objects.get()
    assert (move.phase, move.counts["verified"]) == ("done", True), move.message
    assert_moved_and_exact(made, target)
    assert not pre_images.kept(target, moved_tables())


def test_kept_tables_are_emptied_and_count_only_with_their_triggers(monkeypatch):
    """Where the move's tables stay (Galera: docs/replicas.md#move-tables-stay-on-galera, here
    forced on one server), removing a capture drops the triggers and empties the log and the
    pre-images; the kept tables alone are no capture and no pre-images kept."""
    if connections["shard_0"].vendor != "mysql":
        pytest.skip("tables are kept on Galera only (MariaDB); SQLite drops them with triggers")
    monkeypatch.setattr(capture, "keeps_tables", lambda alias: True)
    source, target = source_and_target()
    entity = on(target, "before")
    tables = moved_tables()
    pre_table = pre_images.table_name("entities")
    try:
        capture.install(target, tables, pre_images=True)
        capture.install(target, tables)
        assert capture.installed(target) and capture.pre_images_kept(target, tables)
        entity["title"] = "after"
        entity.save()  # logged, and its pre-image recorded
        capture.remove(target, tables)
        with connections[target].cursor() as cursor:
            for table in (capture.LOG, pre_table):
                cursor.execute(f"SELECT COUNT(*) FROM {table}")  # still there, and empty
                assert cursor.fetchone()[0] == 0
        assert not capture.installed(target)
        assert not capture.pre_images_kept(target, tables)
        entity["title"] = "again"
        entity.save()  # no trigger writes them now
        assert Entity.objects.get(id=entity.id)["title"] == "again"
    finally:
        monkeypatch.undo()
        capture.remove(target, tables)
    assert not capture.installed(source)


def test_a_kept_pre_image_table_that_no_longer_fits_refuses_the_move(monkeypatch):
    """A kept pre-image table (Galera) whose columns are not its table's any more is never
    dropped while writers run: the move is refused, naming the table and the next step."""
    monkeypatch.setattr(capture, "keeps_tables", lambda alias: True)
    _source, target = source_and_target()
    tables = moved_tables()
    pre_table = pre_images.table_name("entities")
    with connections[target].cursor() as cursor:
        cursor.execute(f"CREATE TABLE {pre_table} (present INT NOT NULL, id BINARY(16))")
    try:
        with pytest.raises(MoveRefused, match=f"{pre_table} kept from an earlier move"):
            capture.install(target, tables, pre_images=True)
        assert pre_images.kept(target, [t for t in tables if t.name == "entities"])
    finally:
        monkeypatch.undo()
        capture.remove(target, tables)
