"""Index rows the server reads out of JSON bodies (tables/json_index.py, issue 45): exactly the
rows Python computes, on generated bodies; whatever the server cannot give exactly is left to
Python; its reads lock no entity. The cleaner's passes that use them:
test_server_backfill.py."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import pytest
from django.db import connections
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemaless_store.config.indexes import Index
from schemaless_store.exceptions import CorruptBody, IndexValueError
from schemaless_store.tables import entities as entity_table
from schemaless_store.tables import index_rows as index_table
from schemaless_store.tables import json_index
from schemaless_store.topology import shards
from schemaless_store.values.codec import JsonCodec, MsgpackCodec, decode_body
from schemaless_store.values.index_values import KeyColumn
from tests.support import STORE, child
from tests.support.raw import index_rows

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
