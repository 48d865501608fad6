"""What the hostile-input tests share (tests/reliability/test_reliability_{codec_fuzz,
corrupt_bodies,injection,unicode_and_sizes}.py): the hostile strings, and raw looks at every
row of the shards, without the store, to tell what a refused input changed."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import connections

from schemaless_store.config.indexes import registry
from schemaless_store.models import Entity
from schemaless_store.topology import bucket_map, shards
from tests.support.reliability_report import Tally

LIST = "/admin/schemaless_store/entity/"  # the admin's list of entities
INJECTIONS = [
    "x`; DROP TABLE entities; --",
    "x'; DROP TABLE entities; --",
    'x"; DROP TABLE entities; --',
    "x); DROP TABLE entities; --",
    "x\\'; DELETE FROM entities; --",
    "1 OR 1=1",
    "x' OR '1'='1",
    "index_link; DROP TABLE entities",
]


def store_tables() -> list[str]:
    return ["entities", "cell", "cell_head", *(index.name for index in registry.valid())]


def snapshot() -> dict[tuple[str, str], list[tuple]]:
    """Every row of ``entities`` and of every index table, per shard, plus the table lists (a
    store table that is gone has no entry)."""
    out: dict[tuple[str, str], list[tuple]] = {}
    for alias in shards.shard_aliases():
        conn = connections[alias]
        with conn.cursor() as cursor:
            names = sorted(conn.introspection.table_names(cursor))
            out[(alias, "<tables>")] = [(name,) for name in names]
            for table in store_tables():
                if table not in names:
                    continue
                cursor.execute(f"SELECT * FROM {conn.ops.quote_name(table)}")
                out[(alias, table)] = sorted(
                    tuple(bytes(v) if isinstance(v, bytearray | memoryview) else v for v in row)
                    for row in cursor.fetchall()
                )
    out[("default", "<tables>")] = [
        (n,) for n in sorted(connections["default"].introspection.table_names())
    ]
    return out


def check_unchanged(tally: Tally, before: dict, what: str) -> dict:
    """Count what changed since ``before``: a table or a row gone is data lost, a table or a row
    added (something a refused input wrote) a wrong result. Returns the snapshot now, for the
    next case to compare with (so one change is counted once)."""
    after = snapshot()
    for key in sorted(before.keys() | after.keys()):
        alias, table = key
        old, new = set(before.get(key, [])), set(after.get(key, []))
        if table != "<tables>" and (key not in before or key not in after):
            continue  # the table itself came or went: counted with the table list
        gone, added = old - new, new - old
        noun = "table" if table == "<tables>" else f"row of {table}"
        if gone:
            tally.lost(f"{what}: {len(gone)} {noun}(s) gone on {alias}", count=len(gone))
        if added:
            tally.wrong(f"{what}: {len(added)} {noun}(s) added on {alias}", count=len(added))
    return after


def raw_entities(skip: bytes | None = None) -> dict[bytes, dict[str, Any]]:
    from schemaless_store.values.codec import decode_body

    found = {}
    for alias in shards.shard_aliases():
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT id, body FROM entities")
            for entity_id, body in cursor.fetchall():
                if bytes(entity_id) != skip:
                    found[bytes(entity_id)] = decode_body(bytes(body))
    return found


def rows_by_entity(skip: bytes | None = None) -> tuple[set, set]:
    """(implied, stored) index rows of every entity but ``skip``, with their shards."""
    implied, stored = set(), set()
    for index in registry.valid():
        for entity_id, props in raw_entities(skip).items():
            for values in index.rows_for(props):
                alias = bucket_map.alias_for(index.routing_key(values[index.shard_position]))
                implied.add((index.name, alias, values, entity_id))
        for alias in shards.shard_aliases():
            conn = connections[alias]
            with conn.cursor() as cursor:
                cursor.execute(f"SELECT * FROM {conn.ops.quote_name(index.name)}")
                for row in cursor.fetchall():
                    row = tuple(
                        bytes(v) if isinstance(v, bytearray | memoryview) else v for v in row
                    )
                    if row[-1] != skip:
                        stored.add((index.name, alias, row[:-1], row[-1]))
    return implied, stored


def rows_of(entity_id: bytes) -> set[tuple]:
    """The index rows (table, shard, row) of one entity, read raw."""
    out = set()
    for index in registry.valid():
        for alias in shards.shard_aliases():
            conn = connections[alias]
            with conn.cursor() as cursor:
                table = conn.ops.quote_name(index.name)
                cursor.execute(f"SELECT * FROM {table} WHERE entity_id = %s", [entity_id])
                for row in cursor.fetchall():
                    out.add(
                        (
                            index.name,
                            alias,
                            tuple(
                                bytes(v) if isinstance(v, bytearray | memoryview) else v
                                for v in row
                            ),
                        )
                    )
    return out


def found_ids(**conditions: Any) -> set[uuid.UUID]:
    return {e.id for e in Entity.objects.filter_index(**conditions)}


def nested(depth: int, leaf: Any = "leaf") -> Any:
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value
