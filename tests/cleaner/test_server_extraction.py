"""Index rows the server reads out of JSON bodies (tables/json_index.py, issue 45): exactly the
rows Python computes, on generated bodies; whatever the server cannot give exactly is left to
Python; the backfill writes them in place (``INSERT ... SELECT``) or streams them, without a
body decoded for the rows the server gives; its reads lock no entity."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import pytest
from django.db import connections
from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemaless_store.cleaner import Cleaner
from schemaless_store.config.indexes import Index
from schemaless_store.exceptions import CorruptBody, IndexValueError
from schemaless_store.models import Entity
from schemaless_store.tables import entities as entity_table
from schemaless_store.tables import index_rows as index_table
from schemaless_store.tables import json_index
from schemaless_store.topology import bucket_map, shards
from schemaless_store.values import codec as codec_module
from schemaless_store.values.codec import JsonCodec, MsgpackCodec, decode_body
from schemaless_store.values.index_values import KeyColumn
from tests.support import STORE, child
from tests.support.buckets import hand_over
from tests.support.cleaner import fixed_after_backfill
from tests.support.invariants import assert_exact
from tests.support.raw import index_rows, insert_index_row

pytestmark = [STORE, pytest.mark.mariadb_only]

ALIAS = "shard_0"
JSON = "schemaless_store.values.codec.JsonCodec"
SAFE = 2**53 - 1

INDEXES = [
    Index(table="index_sx_key", properties=["a"], shard_on="a"),
    Index(table="index_sx_str", properties=["a"], shard_on="a", types={"a": "str"}),
    Index(table="index_sx_int", properties=["a"], shard_on="a", types={"a": "int"}),
    Index(table="index_sx_float", properties=["a"], shard_on="a", types={"a": "float"}),
    Index(
        table="index_sx_pair",
        properties=["a", "b"],
        shard_on="b",
        types={"b": "str"},
        kind="post",
    ),
    Index(
        table="index_sx_short",
        properties=["a"],
        shard_on="a",
        types={"a": KeyColumn(max_bytes=8)},
    ),
]

# Values near every edge the server's expressions have: types, escapes, lengths, numbers.
edge_text = st.sampled_from(
    ["", "x", "é", "😀", "a\nb", "\x00", "\x1f", "\u2028", '"', "\\", "Ab", "aB", "x" * 254]
) | st.text(max_size=30)
numbers = (
    st.integers(-SAFE - 2, SAFE + 2)
    | st.sampled_from([0, -1, 1, 2**52, 2**53, -(2**53), 2**63 - 1, -(2**63), 2**64 - 1])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from(
        [0.0, -0.0, 1.0, 2.5, 1e16, 1e-5, 1e100, 1e-100, 5e-324, 1.7976931348623157e308]
    )
)
scalars = (
    st.none()
    | st.booleans()
    | numbers
    | edge_text
    | st.binary(max_size=6)
    | st.uuids()
    | st.datetimes(timezones=st.just(dt.UTC))
)
values = (
    scalars
    | st.lists(scalars, max_size=3)
    | st.dictionaries(st.text(max_size=3), scalars, max_size=2)
)
bags = st.fixed_dictionaries(
    {},
    # Plain strings often, so that the pair index (b a str column, kind "post") has rows.
    optional={
        "a": values,
        "b": edge_text | values,
        "kind": st.sampled_from(["post", "Post", "user"]) | values,
    },
)
# Bodies no writer of the format writes, but a shard may hold: the server must leave them to
# Python (which reports them) or give what Python gives.
RAW = [
    b"\x03" + b'{"a": 1, "a": 2, "b": "x", "kind": "post"}',
    b"\x03" + b'{"a": "\\u00e9", "b": "\\ud83d\\ude00", "kind": "post"}',
    b"\x03" + b'{"a": "\\ud800", "b": "x", "kind": "post"}',
    b"\x03" + b'{"a": 1e400, "b": "x", "kind": "post"}',
    b"\x03" + b'{"a": 1E5, "b": "x", "kind": "post"}',
    b"\x03" + b'{"a": -0, "b": "x", "kind": "post"}',
    b"\x03" + b'{"a": 12345678901234567890, "b": "x", "kind": "post"}',
    b"\x03" + b'{"a": 0.1000000000000000055511151231257827, "b": "x", "kind": "post"}',
    b"\x03" + b'{"a": "\xff\xfe", "b": "x"}',
    b"\x03" + b'{"a": "x", ',
    b"\x03" + b'["a"]',
    b"\x03" + b'{"a": NaN}',
    b"\x03" + b'{"a": {"$uuid": "12345678-1234-5678-1234-567812345678"}, "b": "x", "kind": "post"}',
    b"\x03" + b'{"a": {"$int": "5"}, "b": "x", "kind": "post"}',
    b"\x03" + b'{"a": "x", "b": "y", "kind": "po\\u0073t"}',
    b"\x03",
    b"\x03" + b'{"a": "x", "b": "y"}',  # no kind: no row in a kind's index
    b"\x03" + b'{"a": "x", "b": "y", "kind": null}',
    b"\x03" + b'{"a": "x", "b": "y", "kind": 5}',
    b"\x03" + b'{"a": "x", "b": "y", "kind": "POST"}',
    # Nested deeper than MariaDB's JSON functions go (32 levels; the codec allows 100).
    b"\x03" + b'{"deep": ' + b"[" * 40 + b"]" * 40 + b', "a": "x", "b": "y", "kind": "post"}',
    b"\x03" + b'{"a": "x", "b": "y", "kind": "post", "deep": ' + b"[" * 40 + b"]" * 40 + b"}",
    MsgpackCodec().encode({"a": "x", "b": "y", "kind": "post"}),
]
raw_bodies = st.sampled_from(RAW)


@pytest.fixture
def sx_tables():
    with (
        child.declared(INDEXES[0]),
        child.declared(INDEXES[1]),
        child.declared(INDEXES[2]),
        child.declared(INDEXES[3]),
        child.declared(INDEXES[4]),
        child.declared(INDEXES[5]),
    ):
        yield


def python_rows(index: Index, body: bytes | None) -> set[tuple[Any, ...]] | None:
    """What today's path gives: the rows, or None (the entity is reported, not indexed)."""
    try:
        properties = {} if body is None else decode_body(body)
        return index.rows_for(properties)
    except (CorruptBody, IndexValueError):
        return None


def _store(bodies: list[bytes]) -> dict[int, tuple[bytes, bytes]]:
    stored = {}
    conn = connections[ALIAS]
    with conn.cursor() as cursor:
        for body in bodies:
            key = uuid.uuid4().bytes
            added_id = entity_table.insert_one(cursor, key, dt.datetime.now(dt.UTC), body)
            stored[added_id] = (key, body)
    return stored


def _wipe(stored: dict[int, tuple[bytes, bytes]]) -> None:
    with connections[ALIAS].cursor() as cursor:
        for key, _body in stored.values():
            entity_table.delete_one(cursor, key)
    for index in INDEXES:
        rows = index_rows(index.name, ALIAS)
        if rows:
            index_table.delete(index, ALIAS, rows)


def _never_refused(conn: Any, buckets: Any) -> frozenset[int]:
    return frozenset()  # placement is not what these tests check: every row stays on ALIAS


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(bodies=st.lists(bags.map(JsonCodec().encode) | raw_bodies, min_size=1, max_size=12))
def test_the_server_gives_exactly_the_rows_python_gives(sx_tables, bodies):
    """For every entity the server does not leave to Python, its row (or no row) is exactly
    :meth:`Index.rows_for` of the decoded body; the ``INSERT ... SELECT`` writes exactly
    those rows."""
    stored = _store(bodies)
    try:
        for index in INDEXES:
            found = json_index.Extraction(index)
            batch = json_index.read_batch(index, found, ALIAS, 0, 2**62, 10_000)
            assert {row.added_id for row in batch} >= set(stored)
            expected_table = set()
            served = []
            for row in batch:
                if row.added_id not in stored:
                    continue
                key, body = stored[row.added_id]
                wanted = python_rows(index, body)
                if row.python:
                    continue  # today's path decides (tested by the cleaner's own tests)
                if row.values is not None:
                    served.append(row.added_id)  # as the backfill asks: the ones with a row
                assert wanted is not None, (index, body, row)
                assert wanted == (set() if row.values is None else {row.values}), (index, body)
                expected_table |= {(*values, key) for values in wanted}
            written = json_index.insert_select(index, found, ALIAS, served, _never_refused)
            assert written == (len(expected_table) if served else 0)
            assert set(index_rows(index.name, ALIAS)) == expected_table, index
    finally:
        _wipe(stored)


def test_plain_values_are_the_servers_and_tagged_ones_pythons(sx_tables):
    """The property above would hold if the server left everything to Python: it does not
    (strings, ints, booleans and null in a key column; a string in a str column...)."""
    plain = [{"a": v, "b": "x", "kind": "post"} for v in ("text", "é😀", 7, -(2**40), True, None)]
    tagged = [{"a": v, "b": "x", "kind": "post"} for v in (b"\x00", uuid.uuid4(), 2**60, 1.5, [1])]
    stored = _store([JsonCodec().encode(bag) for bag in plain + tagged])
    try:
        key_index, pair = INDEXES[0], INDEXES[4]
        batch = json_index.read_batch(
            key_index, json_index.Extraction(key_index), ALIAS, 0, 2**62, 100
        )
        flags = [row.python for row in batch if row.added_id in stored]
        assert flags == [False] * len(plain) + [True] * len(tagged)
        batch = json_index.read_batch(pair, json_index.Extraction(pair), ALIAS, 0, 2**62, 100)
        assert [row.python for row in batch if row.added_id in stored][:3] == [False] * 3
    finally:
        _wipe(stored)


# --- the backfill ------------------------------------------------------------------------------

LINK = Index(table="index_sx_link", properties=["link"], shard_on="link")


def _counting(monkeypatch) -> dict[str, int]:
    """Bodies decoded in Python, batches the server read, ``INSERT ... SELECT`` statements."""
    counts = {"decoded": 0, "read": 0, "in_place": 0}
    decode, read_batch = codec_module.decode_body, json_index.read_batch
    insert_select = json_index.insert_select

    def counting_decode(body):
        counts["decoded"] += 1
        return decode(body)

    def counting_read(*args, **kwargs):
        counts["read"] += 1
        return read_batch(*args, **kwargs)

    def counting_insert(*args, **kwargs):
        written = insert_select(*args, **kwargs)
        assert written is not None
        counts["in_place"] += 1
        return written

    from schemaless_store.cleaner import repairs

    monkeypatch.setattr(repairs, "decode_body", counting_decode)
    monkeypatch.setattr(json_index, "read_batch", counting_read)
    monkeypatch.setattr(json_index, "insert_select", counting_insert)
    return counts


def _posts(count: int) -> list[Entity]:
    return [
        Entity.objects.create(link=f"https://example.com/{n}", n=n, title="é" * (n % 3))
        for n in range(count)
    ]


@pytest.mark.usefixtures("buckets_restored")
def test_a_shard_that_serves_every_bucket_backfills_in_place(monkeypatch):
    hand_over(range(bucket_map.current().buckets), ALIAS)
    bucket_map.forget()
    with override_settings(SCHEMALESS={**_settings(), "CODEC": JSON}):
        entities = _posts(60)
        tagged = Entity.objects.create(link=uuid.uuid4(), n=-1)  # a tagged value: Python's
        assert {shards_of(e) for e in entities} == {ALIAS}
        with child.declared(LINK):
            counts = _counting(monkeypatch)
            summary = Cleaner(indexes=[LINK.name], once=True, batch_size=25).run()
            assert_exact([LINK])
    assert summary.total("inserted") == 61
    assert counts["in_place"] >= 3 and counts["read"] >= 3
    assert counts["decoded"] <= 3  # the tagged entity's body: backfill, repair, sweep
    assert fixed_after_backfill(LINK.name) == 0
    assert tagged.id


@pytest.mark.usefixtures("buckets_restored")
def test_an_in_place_insert_that_read_a_replaced_version_is_taken_back(monkeypatch):
    """The ``INSERT ... SELECT`` reads each entity as of its own statement: a writer may replace
    the version it read, and remove that version's row, before the insert lands. Here it
    lands the old row after the writer's commit (what that race leaves): the entity's version
    no longer matches the batch's read, its rows go to the locked re-check, and the old row
    is gone before the backfill ends (the repair finds nothing to fix)."""
    hand_over(range(bucket_map.current().buckets), ALIAS)
    bucket_map.forget()
    real = json_index.insert_select
    raced: list[bytes] = []

    def racing_insert(index, found, alias, added_ids, refused_by):
        if not raced:
            (row,) = json_index.read_batch(index, found, alias, added_ids[0] - 1, added_ids[0], 1)
            entity = Entity.objects.get(id=uuid.UUID(bytes=row.entity_id))
            entity["link"] = "https://example.com/replaced"
            entity.save()
            raced.append(row.entity_id)
            written = real(index, found, alias, added_ids, refused_by)
            insert_index_row(index.name, alias, (*row.values, row.entity_id))
            return written
        return real(index, found, alias, added_ids, refused_by)

    with override_settings(SCHEMALESS={**_settings(), "CODEC": JSON}):
        _posts(30)
        with child.declared(LINK):
            monkeypatch.setattr(json_index, "insert_select", racing_insert)
            Cleaner(indexes=[LINK.name], once=True, batch_size=10).run()
            assert raced
            assert_exact([LINK])
            assert fixed_after_backfill(LINK.name) == 0


def shards_of(entity: Entity) -> str:
    return bucket_map.alias_for(entity.id.bytes)


def _settings() -> dict[str, Any]:
    from django.conf import settings as django_settings

    return dict(django_settings.SCHEMALESS)


def test_rows_for_other_shards_are_streamed_without_a_body_decoded(monkeypatch):
    with override_settings(SCHEMALESS={**_settings(), "CODEC": JSON}):
        _posts(80)
        with child.declared(LINK):
            counts = _counting(monkeypatch)
            summary = Cleaner(indexes=[LINK.name], once=True, batch_size=30).run()
            assert_exact([LINK])
            rows = index_rows(LINK.name)
    assert summary.total("inserted") == 80 == len(rows)
    assert {row[-1] for row in rows} == set(shards.shard_aliases())  # routed to both
    assert counts["read"] >= 3 and counts["in_place"] == 0
    assert counts["decoded"] == 0


def test_messagepack_bodies_keep_todays_path(monkeypatch):
    """The default codec: no server extraction at all (bodies decoded as before)."""
    msgpack = "schemaless_store.values.codec.MsgpackCodec"
    with override_settings(SCHEMALESS={**_settings(), "CODEC": msgpack}):
        _posts(20)
        with child.declared(LINK):
            counts = _counting(monkeypatch)
            Cleaner(indexes=[LINK.name], once=True, batch_size=30).run()
            assert_exact([LINK])
    assert counts["read"] == counts["in_place"] == 0
    assert counts["decoded"] >= 20


def test_the_insert_select_waits_for_no_writers_row_lock(sx_tables):
    """``INSERT ... SELECT`` at REPEATABLE READ would take shared locks on the entities it
    reads, and wait for a writer holding one (``Lock wait timeout``); at READ COMMITTED it
    reads without locks, whatever the session's own level."""
    index = INDEXES[0]
    stored = _store([JsonCodec().encode({"a": "locked"})])
    (added_id,) = stored
    key = stored[added_id][0]
    writer = connections.create_connection(ALIAS)
    try:
        writer.set_autocommit(False)
        with writer.cursor() as cursor:
            entity_table.update_one(cursor, key, dt.datetime.now(dt.UTC), stored[added_id][1])
        conn = shards.index_connection(ALIAS)
        with conn.cursor() as cursor:
            cursor.execute("SET SESSION innodb_lock_wait_timeout = 1")
            # Django opens MariaDB sessions at READ COMMITTED by default; a site may set
            # OPTIONS["isolation_level"] to "repeatable read": the statement sets its own.
            cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        found = json_index.Extraction(index)
        assert json_index.insert_select(index, found, ALIAS, [added_id], _never_refused) == 1
        assert index_rows(index.name, ALIAS) == [(b"\x50locked", key)]
    finally:
        writer.rollback() if writer.connection else None
        writer.close()
        _wipe(stored)


def test_json_text_the_tests_generate_is_what_the_codec_writes():
    """The raw bodies above are not the codec's: the generated ones are (a sanity check of the
    strategy, so that the property covers the real format)."""
    body = JsonCodec().encode({"a": "é", "b": 1.5, "kind": "post"})
    assert body[:1] == b"\x03" and json.loads(body[1:]) == {"a": "é", "b": 1.5, "kind": "post"}


@pytest.mark.usefixtures("buckets_restored")
def test_a_chunk_the_fence_refuses_in_place_is_streamed_instead(monkeypatch):
    """A move may take buckets away between the batch's read and its ``INSERT ... SELECT``:
    the statement asks the fence first and writes nothing (None); those rows are then routed
    and written as streamed rows are."""
    hand_over(range(bucket_map.current().buckets), ALIAS)
    bucket_map.forget()
    asked = []

    def refused_insert(*args, **kwargs):
        asked.append(args[3])
        return None

    with override_settings(SCHEMALESS={**_settings(), "CODEC": JSON}):
        _posts(25)
        with child.declared(LINK):
            monkeypatch.setattr(json_index, "insert_select", refused_insert)
            summary = Cleaner(indexes=[LINK.name], once=True, batch_size=10).run()
            assert_exact([LINK])
            assert fixed_after_backfill(LINK.name) == 0
    assert sum(len(ids) for ids in asked) == 25
    assert summary.total("inserted") == 25


def test_a_repair_pass_over_json_bodies_fixes_rows_without_a_body_decoded(monkeypatch):
    """Issue 45, item 3: the cleaner's repair passes use the server's extraction too. A ready
    index with a missing row and a stale one is repaired, the server reading the rows every
    entity implies: no body is decoded in Python."""
    from schemaless_store.cleaner import repairs as repairs_module
    from tests.support.cleaner import passes
    from tests.support.raw import raw_delete

    with override_settings(SCHEMALESS={**_settings(), "CODEC": JSON}):
        entities = _posts(40)
        with child.declared(LINK):
            Cleaner(indexes=[LINK.name], once=True, batch_size=30).run()  # ready
            assert_exact([LINK])
            lost, changed = entities[0], entities[1]
            raw_delete(LINK.name, lost.id.bytes)
            old_link = LINK.column_value("link", "https://example.com/old")
            home = bucket_map.alias_for(LINK.routing_key(old_link))
            insert_index_row(LINK.name, home, (old_link, changed.id.bytes))
            repaired_before = len(passes(index_name=LINK.name, kind="repair"))

            python_rows: list[bytes] = []
            server_reads = {"repair": 0, "sweep": 0}
            newest_first, current = json_index.read_newest_first, json_index.current

            def reading(kind, real):
                def read(*args, **kwargs):
                    server_reads[kind] += 1
                    return real(*args, **kwargs)

                return read

            monkeypatch.setattr(json_index, "read_newest_first", reading("repair", newest_first))
            monkeypatch.setattr(json_index, "current", reading("sweep", current))
            monkeypatch.setattr(
                repairs_module,
                "decode_body",
                lambda body: python_rows.append(body) or decode_body(body),
            )
            summary = Cleaner(indexes=[LINK.name], once=True, batch_size=30).run()
            assert_exact([LINK])
    assert summary.total("inserted") == 1 and summary.total("stale_removed") == 1
    repairs = passes(index_name=LINK.name, kind="repair")[repaired_before:]
    assert repairs and {p.status for p in repairs} == {"done"}
    # The server read the repair's batches and the sweep's entities; Python decoded none.
    assert server_reads["repair"] >= 2 and server_reads["sweep"] >= 1, server_reads
    assert python_rows == []
