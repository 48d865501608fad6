"""JSON bodies in a store (issue 45, item 1): the server reads them (MariaDB's JSON functions on
``SUBSTRING(body, 2)``), old MessagePack rows stay readable beside them, and
``manage.py rewritebodies`` rewrites a live store's bodies online, resumably, losing no
concurrent write, each entity keeping its ``updated`` time."""

from __future__ import annotations

import datetime as dt
import random
import threading
import time
import uuid
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connections
from django.test import override_settings

from schemaless_store.mapping import rewrite_bodies, walk
from schemaless_store.models import Entity
from schemaless_store.tables import entities as entity_table
from schemaless_store.topology import bucket_map, shards
from schemaless_store.values.codec import body_format
from schemaless_store.values.index_values import DateTimeColumn
from tests.support import STORE
from tests.support.factories import NumberedFactory
from tests.support.invariants import assert_exact
from tests.support.mapping import forget_runs
from tests.support.values import EVERY_TYPE, deep_same

pytestmark = STORE

JSON = override_settings(
    SCHEMALESS={"BUCKETS": 4096, "CODEC": "schemaless_store.values.codec.JsonCodec"}
)


MSGPACK = override_settings(
    SCHEMALESS={"BUCKETS": 4096, "CODEC": "schemaless_store.values.codec.MsgpackCodec"}
)


@pytest.fixture(autouse=True)
def _fresh_runs():
    """MessagePack until a test says JSON (whatever SCHEMALESS_TEST_CODEC is); no run's
    checkpoints or saved marks from another test."""
    with MSGPACK:
        yield
    forget_runs()


def stored_rows() -> dict[uuid.UUID, tuple[bytes, object]]:
    """Every entity's raw body and ``updated``, read without the store."""
    found = {}
    for alias in shards.shard_aliases():
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT id, body, updated FROM entities")
            for key, body, updated in cursor.fetchall():
                found[uuid.UUID(bytes=bytes(key))] = (bytes(body), updated)
    return found


def formats() -> set[str]:
    return {body_format(body) for body, _updated in stored_rows().values()}


def test_msgpack_and_json_rows_are_read_side_by_side():
    old = Entity.objects.create(**EVERY_TYPE)
    with JSON:
        new = Entity.objects.create(**EVERY_TYPE)
        assert formats() == {"msgpack", "json"}
        for entity_id in (old.id, new.id):
            assert deep_same(Entity.objects.get(id=entity_id).body_properties(), EVERY_TYPE)
    assert deep_same(Entity.objects.get(id=new.id).body_properties(), EVERY_TYPE)


def test_rewritebodies_rewrites_every_body_keeping_properties_updated_and_indexes():
    entities = [Entity.objects.create(**EVERY_TYPE, n=n) for n in range(3)]
    entities += NumberedFactory.create_batch(12, link="https://a", tags=["t"])
    before = stored_rows()
    wanted = {e.id: Entity.objects.get(id=e.id).properties for e in entities}
    with JSON:
        out = StringIO()
        call_command("rewritebodies", "--batch-size", "4", stdout=out)
        assert "JsonCodec" in out.getvalue()
        after = stored_rows()
        assert {body_format(body) for body, _ in after.values()} == {"json"}
        for entity_id, (body, updated) in after.items():
            assert updated == before[entity_id][1]  # a new format is not an edit
            assert body != before[entity_id][0]
            assert deep_same(Entity.objects.get(id=entity_id).properties, wanted[entity_id])
        assert_exact()
        again = rewrite_bodies()  # done: nothing walked again
        assert again.ok and again.changed == 0
    assert rewrite_bodies().changed == 15  # back into MessagePack is another run
    assert formats() == {"msgpack"}


def test_a_dry_run_counts_and_writes_nothing():
    NumberedFactory.create_batch(5)
    with JSON:
        summary = rewrite_bodies(dry_run=True)
    assert summary.ok and summary.changed == 5
    assert formats() == {"msgpack"}


def test_concurrent_writers_lose_no_update_during_a_rewrite():
    ids = [e.id for e in NumberedFactory.create_batch(40)]
    hot = ids[::2]  # the writers' entities; only the rewrite writes the others
    added = dict.fromkeys(ids, 0)
    guard, stop, errors = threading.Lock(), threading.Event(), []

    def bump(entity: Entity) -> None:
        entity["n"] += 1000

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        try:
            while not stop.is_set():
                target = rng.choice(hot)
                Entity.objects.modify(target, bump, attempts=100)
                with guard:
                    added[target] += 1
        except Exception as exc:
            errors.append(repr(exc))
        finally:
            connections.close_all()
            shards.close_index_connections()

    with JSON:
        threads = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
        for thread in threads:
            thread.start()
        try:
            time.sleep(0.2)
            summary = rewrite_bodies(batch_size=3, sleep=0.01)
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=60)
        assert not errors and summary.ok, (errors, summary.problems)
        assert sum(added.values()) > 0
        numbers = {e.id: e["n"] for e in Entity.objects.get_many(ids).values()}
        start = dict(zip(ids, range(40), strict=True))
        assert numbers == {i: start[i] + 1000 * added[i] for i in ids}  # every bump kept
        assert formats() == {"json"}
        assert summary.changed >= len(ids) - len(hot)


def test_a_kill_between_a_commit_and_its_checkpoint_resumes(monkeypatch):
    NumberedFactory.create_batch(20)

    def dies(point):
        raise RuntimeError("killed before the checkpoint")

    with JSON:
        monkeypatch.setattr(walk, "save_checkpoint", dies)
        first = rewrite_bodies(batch_size=4, shards=["shard_0"])
        monkeypatch.undo()
        assert not first.ok and first.changed > 0
        done = rewrite_bodies(batch_size=4)
        assert done.ok, done.problems
        assert formats() == {"json"}
        assert done.skipped == first.changed  # saved, not checkpointed: not written again
        assert done.changed == 20 - first.changed


# --- the server reads the body ----------------------------------------------------------------

WHEN = dt.datetime(2009, 2, 26, 1, 2, 3, 456789, tzinfo=dt.timezone(dt.timedelta(hours=-5)))


def _one(alias: str, sql: str, params: tuple = ()) -> object:
    with connections[alias].cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()[0]


@pytest.mark.mariadb_only
def test_mariadb_json_functions_read_and_change_a_stored_json_body():
    with JSON:
        entity = Entity.objects.create(
            user_id=12345,
            title="héllo ✓",
            score=2.5,
            at=WHEN,
            uid=uuid.UUID(int=7),
            b=b"\xff",
            big=2**64 - 1,
        )
    old = Entity.objects.create(user_id=1)  # MessagePack: the server sees no document
    alias, key = bucket_map.alias_for(entity.id.bytes), entity.id.bytes
    doc = entity_table.JSON_BODY

    def value(path: str) -> object:
        return _one(alias, f"SELECT JSON_VALUE({doc}, %s) FROM entities WHERE id = %s", (path, key))

    assert value("$.user_id") == "12345"
    assert value("$.title") == "héllo ✓"
    assert value("$.score") == "2.5"
    assert value('$.uid."$uuid"') == str(uuid.UUID(int=7))
    assert value('$.at."$datetime"') == "2009-02-26T01:02:03.456789-05:00"
    assert value("$.missing") is None
    old_alias = bucket_map.alias_for(old.id.bytes)
    sql = f"SELECT JSON_VALUE({doc}, '$.user_id') FROM entities WHERE id = %s"
    assert _one(old_alias, sql, (old.id.bytes,)) is None
    # A tagged datetime's instant, on the server: its index value (microseconds since the epoch).
    micros = (
        "TIMESTAMPDIFF(MICROSECOND, '1970-01-01', CAST(LEFT(t, 26) AS DATETIME(6)))"
        " - IF(SUBSTRING(t, 27, 1) = '-', -1, 1) * TIME_TO_SEC(SUBSTRING(t, 28)) * 1000000"
    )
    sql = (
        f"SELECT {micros} FROM (SELECT JSON_VALUE({doc}, '$.at.\"$datetime\"') AS t "
        "FROM entities WHERE id = %s) AS d"
    )
    assert _one(alias, sql, (key,)) == DateTimeColumn().to_db(WHEN)
    assert (
        _one(
            alias,
            f"SELECT FROM_BASE64(JSON_VALUE({doc}, '$.b.\"$base64\"')) FROM entities WHERE id = %s",
            (key,),
        )
        == b"\xff"
    )
    assert (
        _one(
            alias,
            f"SELECT JSON_EXTRACT({doc}, '$.user_id') + 1 FROM entities WHERE id = %s",
            (key,),
        )
        == 12346
    )
    tagged = {
        "UNHEX(REPLACE(JSON_VALUE({doc}, '$.uid.\"$uuid\"'), '-', ''))": uuid.UUID(int=7).bytes,
        "CAST(JSON_VALUE({doc}, '$.big.\"$int\"') AS DECIMAL(20))": 2**64 - 1,
    }
    for expression, expected in tagged.items():
        sql = f"SELECT {expression.format(doc=doc)} FROM entities WHERE id = %s"
        assert _one(alias, sql, (key,)) == expected, expression
    # JSON_SET on the server, behind the format byte: the store reads what it wrote.
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "UPDATE entities SET body = CONCAT(LEFT(body, 1), "
            f"JSON_SET({doc}, '$.title', %s, '$.user_id', 12346)) WHERE id = %s",
            ("changed ✓", key),
        )
    found = Entity.objects.get(id=entity.id)
    assert found["title"] == "changed ✓" and found["user_id"] == 12346
    assert found["at"] == WHEN and found["uid"] == uuid.UUID(int=7)
    # An index on a property, kept by the server: a virtual column over the same expression.
    with connections[alias].cursor() as cursor:
        cursor.execute("CREATE TABLE json_probe AS SELECT id, body FROM entities")
        try:
            cursor.execute(
                f"ALTER TABLE json_probe ADD COLUMN user_id BIGINT AS "
                f"(JSON_VALUE({doc}, '$.user_id')) VIRTUAL, ADD INDEX by_user (user_id)"
            )
            cursor.execute("SELECT id FROM json_probe FORCE INDEX (by_user) WHERE user_id = 12346")
            assert [bytes(row[0]) for row in cursor.fetchall()] == [key]
        finally:
            cursor.execute("DROP TABLE json_probe")


def test_rewritebodies_shows_each_shards_progress_on_a_terminal_and_none_elsewhere():
    """What an operator watching the command sees: a bar per shard that reaches 100%, drawn on
    stderr in the terminal's own colour; piped (no terminal), no bar at all."""
    import re

    from schemaless_store.management.commands import rewritebodies
    from tests.support.terminal import ESC, on_terminal

    NumberedFactory.create_batch(30)
    with JSON:
        command, out, err = on_terminal(rewritebodies.Command)
        call_command(command, "--batch-size", "4")
    drawn = [p for p in re.split(r"[\r\n]", err.getvalue()) if re.search(r": +\d+%\|", p)]
    for alias in shards.shard_aliases():
        assert any(f" on {alias}: 100%|" in bar for bar in drawn), drawn
    assert not [bar for bar in drawn if f"{ESC}31" in bar]  # not styled as an error (red)
    assert "JsonCodec" in out.getvalue()

    piped_out, piped_err = StringIO(), StringIO()
    call_command("rewritebodies", "--restart", stdout=piped_out, stderr=piped_err)
    assert "%|" not in piped_err.getvalue()
    assert formats() == {"msgpack"}
