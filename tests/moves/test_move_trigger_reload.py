"""A table whose cached triggers a KILL cut short is reopened by the mover
(docs/resharding.md#a-trigger-that-failed-to-load).

A history run (every fault, moves) found every write to the target's ``cell`` table failing
with "Trigger 'schemaless_mv_..._pi' has an error in its body", and each resumed mover with it:
a session KILLed while MariaDB parsed the table's triggers left a half-parsed list in the
server's cached table, used by every session from then on. Here a statement's
``max_statement_time`` stops it while it opens a table whose trigger takes longer than that
to parse: the same cut, every time.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connections

from schemaless_store.config.metadata import BucketMove
from schemaless_store.models import Entity
from schemaless_store.moves.mover import Mover
from schemaless_store.tables import trigger_reload
from schemaless_store.tables.moved_rows import moved_tables
from schemaless_store.topology import bucket_map, shards
from tests.support import STORE
from tests.support.moving import (
    MOVED,
    MOVED_SET,
    assert_moved_and_exact,
    dies_at,
    populate,
    run,
    source_and_target,
)

pytestmark = [STORE, pytest.mark.mariadb_only, pytest.mark.usefixtures("buckets_restored")]

SLOW = "test_slow_to_parse"
# Statements in the slow trigger's body: its parse outlasts ``max_statement_time`` below.
STATEMENTS = 3000
ENTITIES = next(t for t in moved_tables() if t.name == "entities")


@pytest.fixture
def slow_trigger() -> Iterator[None]:
    """A trigger of the test's own on ``entities`` on every shard, which does nothing and takes
    tens of milliseconds to parse."""
    body = " ".join(f"SET @unused = {n};" for n in range(STATEMENTS))
    aliases = shards.shard_aliases()
    for alias in aliases:
        with connections[alias].cursor() as cursor:
            cursor.execute(
                f"CREATE TRIGGER {SLOW} AFTER UPDATE ON entities FOR EACH ROW BEGIN {body} END"
            )
    try:
        yield
    finally:
        for alias in aliases:
            with connections[alias].cursor() as cursor:
                cursor.execute(f"DROP TRIGGER IF EXISTS {SLOW}")
                cursor.execute("FLUSH TABLES entities")


def cut_short(alias: str, tries: int = 10) -> None:
    """Open ``entities`` on ``alias`` afresh in a statement stopped while it parses the
    triggers (as a KILL stops it), until a write to it fails (another session may open the
    table first, and parse the triggers whole)."""
    for _ in range(tries):
        with connections[alias].cursor() as cursor:
            cursor.execute("FLUSH TABLES entities")
            try:
                cursor.execute(
                    "SET STATEMENT max_statement_time = 0.001 FOR SELECT * FROM entities"
                )
            except Exception as exc:
                assert "max_statement_time" in str(exc), exc
        if trigger_reload.broken(alias, ENTITIES):
            return
    raise AssertionError(f"{tries} statements stopped in the parse left entities sound")


def test_a_cut_parse_fails_every_write_to_the_table_until_it_is_reloaded(slow_trigger):
    entity = Entity.objects.create(title="before")
    alias = bucket_map.alias_for(entity.id.bytes)
    cut_short(alias)
    entity["title"] = "after"
    with pytest.raises(Exception, match="has an error in its body"):
        entity.save()  # the server's own state, before any repair: every write fails
    assert trigger_reload.broken(alias, ENTITIES)
    others = [a for a in shards.shard_aliases() if a != alias]
    assert not any(trigger_reload.broken(a, ENTITIES) for a in others)

    assert trigger_reload.repair(alias, moved_tables()) == ["entities"]
    assert not trigger_reload.broken(alias, ENTITIES)
    entity.save()
    assert Entity.objects.get(id=entity.id)["title"] == "after"
    assert trigger_reload.repair(alias, moved_tables()) == []  # nothing left to reload


def test_a_resumed_mover_reopens_a_table_whose_triggers_failed_to_load(monkeypatch, slow_trigger):
    """The mover dies during its catch-up; a KILL then cuts the parse of a source's
    ``entities`` triggers (every write to it fails). Resumed, the mover reopens its tables
    first and the move completes exactly, with a write made once the table was reopened.
    Without the reopening, the resumed mover fails on the table as the writers do."""
    made = populate(20)
    source, target = source_and_target()
    dies_at(monkeypatch, "catch_up", "--to", target, "--buckets", MOVED)
    cut_short(source)
    with monkeypatch.context() as patched:
        patched.setattr(trigger_reload, "repair", lambda alias, tables, always=False: [])
        with pytest.raises(Exception, match=f"Trigger '{SLOW}' has an error in its body"):
            run("--to", target, "--buckets", MOVED)
    assert trigger_reload.broken(source, ENTITIES)

    reloads: list[str] = []
    reload = trigger_reload.reload

    def counted(alias: str, table: str) -> bool:
        done = reload(alias, table)
        reloads.append(f"{alias}/{table}")
        if f"{alias}/{table}" != f"{source}/entities":
            return done
        moved = next(i for i in made if bucket_map.bucket_for(i.bytes) in MOVED_SET)
        entity = Entity.objects.get(id=moved)  # a writer's write once the table was reopened
        entity["title"] = "written once the table was reopened"
        entity.save()
        made[moved]["title"] = entity["title"]
        return done

    monkeypatch.setattr(trigger_reload, "reload", counted)
    run("--to", target, "--buckets", MOVED)
    move = BucketMove.objects.get()
    assert (move.phase, move.counts["verified"]) == ("done", True), move.message
    # The broken table, and no table a write proved sound (the target's entities has rows).
    assert reloads.count(f"{source}/entities") == 1 and f"{target}/entities" not in reloads
    assert_moved_and_exact(made, target)


def test_the_mover_looks_again_after_its_fence_ends_sessions(monkeypatch):
    """A session the fence ends may be parsing a table's triggers: the mover checks every
    table of the move on its shards right after the fence."""
    populate(4)
    source, target = source_and_target()
    checked: list[str] = []
    repair = trigger_reload.repair

    def seen(alias, tables, always=False):
        checked.append(alias)
        return repair(alias, tables, always=always)

    fence = Mover._fence

    def fenced(mover):
        checked.append("fence")
        fence(mover)

    monkeypatch.setattr(trigger_reload, "repair", seen)
    monkeypatch.setattr(Mover, "_fence", fenced)
    run("--to", target, "--buckets", MOVED)
    after = checked[checked.index("fence") + 1 :]
    assert {source, target} <= set(after[:2]), checked


def test_a_reload_never_queues_the_tables_users_behind_a_long_transaction(monkeypatch):
    """The reload's ``ALTER`` needs the table's metadata lock: behind a transaction that holds
    it, it gives up after its wait (readers and writers queued behind it meanwhile) and is
    left to the mover's next look."""
    monkeypatch.setattr(trigger_reload, "LOCK_WAIT", 1)
    entity = Entity.objects.create(title="held")
    alias = bucket_map.alias_for(entity.id.bytes)
    holder = connections.create_connection(alias)
    try:
        with holder.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("SELECT COUNT(*) FROM entities")
        assert trigger_reload.reload(alias, "entities") is False
        with holder.cursor() as cursor:
            cursor.execute("ROLLBACK")
        assert trigger_reload.reload(alias, "entities") is True
    finally:
        holder.close()
    assert Entity.objects.get(id=entity.id)["title"] == "held"


def test_a_mover_that_meets_a_table_whose_triggers_failed_to_load_resumes_itself(
    monkeypatch, slow_trigger
):
    """Mid-move, a KILL cuts the parse of a source's ``entities`` triggers and the mover's
    next write there fails with the server's error: the command resumes the move in the same
    process (as after a lost connection), the new mover reopens the table as it starts, and
    the move completes exactly."""
    made = populate(20)
    source, target = source_and_target()
    moved = next(i for i in made if bucket_map.bucket_for(i.bytes) in MOVED_SET)
    catch_up = Mover.catch_up
    met: list[str] = []

    def cut_then_catch_up(mover: Mover) -> None:
        if not met:
            cut_short(source)
            entity = Entity.objects.get(id=moved)
            entity["title"] = "refused while the triggers were broken"
            try:
                entity.save()  # what the mover's own next write there meets
            except Exception as exc:
                met.append(str(exc))
                raise
        catch_up(mover)

    monkeypatch.setattr(Mover, "catch_up", cut_then_catch_up)
    run("--to", target, "--buckets", MOVED)
    assert met and "has an error in its body" in met[0]
    move = BucketMove.objects.get()
    assert (move.phase, move.counts["verified"]) == ("done", True), move.message
    assert_moved_and_exact(made, target)
