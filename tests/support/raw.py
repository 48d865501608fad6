"""Raw looks at the shards, bypassing the store, to check what it really wrote."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import connections

from schemaless_store.topology import shards

if TYPE_CHECKING:
    from schemaless_store.models import Entity


def own_session(alias: str) -> Any:
    """A MariaDB driver session of its own on ``alias``'s database (not Django's), in
    autocommit."""
    import MySQLdb

    settings = connections[alias].settings_dict
    return MySQLdb.connect(
        host=settings["HOST"] or "127.0.0.1",
        port=int(settings["PORT"]),
        user=settings["USER"],
        password=settings["PASSWORD"],
        database=settings["NAME"],
    )


def entity_rows(alias: str) -> list[bytes]:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT id FROM entities")
        return [bytes(r[0]) for r in cursor.fetchall()]


def index_rows(table: str, alias: str | None = None) -> list[tuple]:
    """Rows of an index table on one shard, or on all shards (with the alias appended)."""
    aliases = [alias] if alias else list(shards.shard_aliases())
    out = []
    for name in aliases:
        conn = connections[name]
        with conn.cursor() as cursor:
            cursor.execute(f"SELECT * FROM {conn.ops.quote_name(table)}")
            for row in cursor.fetchall():
                values = tuple(
                    bytes(v) if isinstance(v, bytearray | memoryview) else v for v in row
                )
                out.append(values if alias else (*values, name))
    return out


def count_everything() -> int:
    """Entities plus index rows on every shard: a write that failed must not change it."""
    from schemaless_store.config.indexes import registry

    total = 0
    for alias in shards.shard_aliases():
        total += len(entity_rows(alias))
        for index in registry.valid():
            total += len(index_rows(index.name, alias))
    return total


def insert_index_row(table: str, alias: str, values: tuple) -> None:
    conn = connections[alias]
    marks = ", ".join(["%s"] * len(values))
    with conn.cursor() as cursor:
        cursor.execute(f"INSERT INTO {conn.ops.quote_name(table)} VALUES ({marks})", list(values))


def raw_delete(table: str, entity_id: bytes) -> None:
    """Every row of ``entity_id`` in ``table``, on every shard, gone."""
    for alias in shards.shard_aliases():
        conn = connections[alias]
        with conn.cursor() as cursor:
            cursor.execute(
                f"DELETE FROM {conn.ops.quote_name(table)} WHERE entity_id = %s", [entity_id]
            )


def raw_set_body(entity: Entity, body: bytes) -> None:
    """The entity's stored body overwritten with ``body`` (corrupt bytes, or another bag)."""
    with connections[entity.shard].cursor() as cursor:
        cursor.execute("UPDATE entities SET body = %s WHERE id = %s", [body, entity.id.bytes])


@dataclass
class Read:
    alias: str
    sql: str
    rows: int


def record_reads(monkeypatch: Any, table: str | None = None) -> list[Read]:
    """From now on, every ``shards.read`` (on any thread) whose SQL names ``table`` (default:
    all), with the number of rows it returned."""
    reads: list[Read] = []
    real = shards.read

    def read(alias: str, sql: str, params: Any, conn: Any = None) -> list[tuple]:
        rows = real(alias, sql, params, conn)
        if table is None or table in sql:
            reads.append(Read(alias, sql, len(rows)))
        return rows

    monkeypatch.setattr(shards, "read", read)
    return reads


def walk_pages(qs: Any, size: int, between: Any = None) -> list[Any]:
    """The ids of every entity of ``qs``, page after page; ``between()`` runs once, after the
    first page (e.g. to insert entities while a reader pages)."""
    paged, cursor = [], None
    while True:
        page = qs.page(after=cursor, size=size)
        paged.extend(e.id for e in page)
        if not page.has_next:
            return paged
        assert len(page) == size, "a page short of its size has a next one"
        assert len(paged) <= 100, "paging does not end"
        if between is not None:
            between()
            between = None
        cursor = page.next_cursor
