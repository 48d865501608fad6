"""A move's change-capture trigger left behind never fails a write
(docs/resharding.md#left-over-triggers).

A 30-minute Galera history soak found a trigger of a finished move still on a shard whose
server and sessions were being killed: the server listed it and it fired, but ``DROP TRIGGER
IF EXISTS`` found no trigger by its name, so once the move dropped its log every write the
trigger fired on failed, and the next move into that shard could never copy. MariaDB keeps a
table's triggers in its ``.TRG`` file and each trigger's name in a ``.TRN`` file; a trigger
whose ``.TRN`` is gone behaves exactly so, which is how the test makes one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connections

from schemaless_store.models import Entity
from schemaless_store.tables import move_log as capture
from schemaless_store.tables.moved_rows import moved_tables
from schemaless_store.topology import bucket_map
from tests.support import STORE

pytestmark = [STORE, pytest.mark.usefixtures("buckets_restored")]


def trigger_file(alias: str, name: str) -> Path:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT @@datadir, DATABASE()")
        datadir, database = cursor.fetchone()
    return Path(datadir) / database / f"{name}.TRN"


def test_a_trigger_the_server_cannot_drop_by_name_never_fails_a_write():
    if connections["shard_0"].vendor != "mysql":
        pytest.skip("MariaDB's trigger files; SQLite drops a trigger with its schema row")
    entity = Entity.objects.create(title="before")
    source = bucket_map.alias_for(entity.id.bytes)
    tables = moved_tables()
    name = capture.trigger_name("entities", "u")
    named = trigger_file(source, name)
    kept = None
    try:
        capture.install(source, tables)
        kept = named.read_bytes()
        named.unlink()  # the server still has the trigger, and no longer finds it by name
        assert capture.remove(source, tables) == [name]
        entity["title"] = "after"
        entity.save()  # the trigger fires and its log is gone: the write goes on
        assert Entity.objects.get(id=entity.id)["title"] == "after"
    finally:
        if kept is not None and not named.exists():
            named.write_bytes(kept)
        capture.remove(source, tables)
    assert capture.leftovers(source) == []


def decoy(alias: str, table: str, suffix: str) -> str:
    """A trigger under the name a move gives ``table``'s trigger, which logs nothing: a name
    with no capture behind it (a trigger of an older store, or one half dropped)."""
    name = capture.trigger_name(table, suffix)
    event = {"i": "INSERT", "u": "UPDATE", "d": "DELETE"}[suffix]
    conn = connections[alias]
    body = "SET @schemaless_decoy = 1" if conn.vendor == "mysql" else "BEGIN SELECT 1; END"
    with conn.cursor() as cursor:
        cursor.execute(f"CREATE TRIGGER {name} AFTER {event} ON {table} FOR EACH ROW {body}")
    return name


def logged(alias: str) -> set[tuple[str, bytes]]:
    return {(table, key) for _seq, table, key in capture.read(alias, 1000)}


def test_a_trigger_name_that_logs_nothing_is_proven_by_a_probe_and_recreated():
    """Issue 43: ``CREATE TRIGGER IF NOT EXISTS`` passes over a name that is taken, whatever
    is behind it. Each trigger is proven by a probe write that must appear in the log."""
    entity = Entity.objects.create(title="before")
    source = bucket_map.alias_for(entity.id.bytes)
    tables = moved_tables()
    decoy(source, "entities", "u")
    try:
        capture.install(source, tables)
        entity["title"] = "after"
        entity.save()
        assert ("entities", entity.id.bytes) in logged(source)
    finally:
        capture.remove(source, tables)


def test_a_trigger_that_cannot_be_made_to_log_refuses_the_copy_and_names_the_next_step(
    monkeypatch,
):
    from django.core.management import CommandError

    from schemaless_store.config.metadata import BucketMove
    from tests.support.moving import MOVED, run, source_and_target

    source, target = source_and_target()
    name = decoy(source, "entities", "d")
    # The server keeps the decoy whatever is done (as a trigger it cannot drop by name).
    monkeypatch.setattr(capture, "drop_trigger", lambda cursor, trigger: None, raising=False)
    try:
        with pytest.raises(CommandError, match=rf"{name}.*(docs/resharding.md#left-over-triggers)"):
            run("--to", target, "--buckets", MOVED)
        move = BucketMove.objects.get()
        assert move.phase == "copying" and not move.counts.get("copied entities")
    finally:
        monkeypatch.undo()
        capture.remove(source, moved_tables())


def test_a_trigger_name_left_without_its_trigger_is_repaired():
    """MariaDB: the name's ``.TRN`` file is there, the trigger is not (in the table's
    ``.TRG``): ``CREATE TRIGGER IF NOT EXISTS`` finds the name and creates nothing."""
    if connections["shard_0"].vendor != "mysql":
        pytest.skip("MariaDB's trigger files")
    entity = Entity.objects.create(title="before")
    source = bucket_map.alias_for(entity.id.bytes)
    tables = moved_tables()
    name = capture.trigger_name("entities", "u")
    named = trigger_file(source, name)
    try:
        capture.install(source, tables)
        kept = named.read_bytes()
        with connections[source].cursor() as cursor:
            cursor.execute(f"DROP TRIGGER {name}")
        named.write_bytes(kept)  # the name is back; no trigger behind it
        capture.install(source, tables)  # a resumed mover installs again
        entity["title"] = "after"
        entity.save()
        assert ("entities", entity.id.bytes) in logged(source)
    finally:
        capture.remove(source, tables)
        if named.exists():
            named.unlink()


def test_a_resumed_mover_whose_trigger_stopped_logging_copies_again(monkeypatch):
    """The mover dies during the catch-up; meanwhile a source's trigger is replaced by one
    that logs nothing and a writer updates a moved entity. Resumed, the mover proves the
    triggers, recreates that one and copies again: the update is on the target."""
    from schemaless_store.config.metadata import BucketMove
    from tests.support.moving import (
        MOVED,
        MOVED_SET,
        assert_moved_and_exact,
        dies_at,
        populate,
        run,
        source_and_target,
    )

    made = populate(20)
    source, target = source_and_target()
    dies_at(monkeypatch, "catch_up", "--to", target, "--buckets", MOVED)
    with connections[source].cursor() as cursor:
        cursor.execute(f"DROP TRIGGER {capture.trigger_name('entities', 'u')}")
    decoy(source, "entities", "u")
    moved = next(i for i in made if bucket_map.bucket_for(i.bytes) in MOVED_SET)
    entity = Entity.objects.get(id=moved)
    entity["title"] = "written while the trigger logged nothing"
    entity.save()
    made[moved]["title"] = entity["title"]
    run("--to", target, "--buckets", MOVED)
    move = BucketMove.objects.get()
    assert (move.phase, move.counts["verified"]) == ("done", True), move.message
    assert_moved_and_exact(made, target)
