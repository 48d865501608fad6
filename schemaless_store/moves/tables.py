"""What a bucket move copies: every table of a shard, with the column that places each row in a
bucket, the key that names a row, and the statements that read, write and delete rows in bulk.

``entities`` rows sit in the bucket of their ``id``, ``cell`` and ``cell_head`` rows in that of
their ``row_key``, and index rows in that of their ``shard_on`` value. A moved row gets the
target's own auto-increment key (``added_id``, ``added_at``); everything else is copied as is.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from .. import shards
from ..indexes import Index, registry
from ..tables import keyset
from ..tables.entities import chunks
from ..tables.values import plain_row

# Rows per statement when rows are written or deleted by key.
WRITE_CHUNK = 200


@dataclass(frozen=True)
class MovedTable:
    """One table as a move sees it."""

    name: str
    columns: tuple[str, ...]  # copied columns, the key's first
    natural_key: tuple[str, ...]  # names a row (a unique key), without the auto-increment one
    walk_key: tuple[str, ...]  # the order a copy walks in (the primary key)
    routed_by: str  # the column whose key decides the bucket (its value, encoded for indexes)
    index: Index | None = None  # for index tables
    mutable: bool = True  # rows change in place (upserted), or only appear and go
    # Constant columns a copy gets on the target (``cell.moved``: the feed passes over it).
    marks: tuple[tuple[str, Any], ...] = ()
    # Rows the source keeps after the move (cells: the change feed's record of what was
    # written there; no longer served, as reads go to the owner).
    kept_on_source: bool = False

    def bucket(self, row: Sequence[Any]) -> int:
        """The bucket of a row of ``columns`` (or of a row of ``walk_key`` + ``columns``)."""
        position = self.columns.index(self.routed_by)
        value = row[position]
        if self.index is not None:
            return shards.bucket_for(self.index.routing_key(value))
        return shards.bucket_for(bytes(value))

    def log_key(self) -> str:
        """The column a change log entry names (and a replay reads rows by)."""
        return "entity_id" if self.index is not None else self.routed_by


def moved_tables() -> list[MovedTable]:
    """The store's tables on every shard: entities, cells, and every declared index."""
    found = [
        MovedTable(
            "entities", ("id", "updated", "body"), ("id",), ("added_id",), "id", mutable=True
        ),
        MovedTable(
            "cell",
            ("row_key", "column_name", "ref_key", "body", "created_at"),
            ("row_key", "column_name", "ref_key"),
            ("added_at",),
            "row_key",
            mutable=False,
            marks=(("moved", True),),
            kept_on_source=True,
        ),
        MovedTable(
            "cell_head",
            ("row_key", "column_name", "ref_key", "updated", "body"),
            ("row_key", "column_name"),
            ("added_id",),
            "row_key",
        ),
    ]
    for index in registry.valid():
        names = (*index.properties, "entity_id")
        found.append(
            MovedTable(index.name, names, names, names, index.shard_on, index, mutable=False)
        )
    return found


def walk(
    alias: str,
    table: MovedTable,
    after: Sequence[Any] | None,
    limit: int,
    conn: BaseDatabaseWrapper | None = None,
) -> list[tuple[Any, ...]]:
    """Rows ``(*walk_key, *columns)`` of ``table`` on ``alias`` after ``after`` in walk order
    (on ``conn``, if given: a snapshot's)."""
    conn = conn or shards.connection(alias)
    quote = conn.ops.quote_name
    walk_cols = [quote(c) for c in table.walk_key]
    where, params = "", list[Any]()
    if after is not None:
        bound, params = keyset.after(walk_cols, list(after))
        where = f" WHERE {bound}"
    selected = ", ".join([*walk_cols, *(quote(c) for c in table.columns)])
    rows = shards.read(
        alias,
        f"SELECT {selected} FROM {quote(table.name)}{where} "
        f"ORDER BY {', '.join(walk_cols)} LIMIT {int(limit)}",
        params,
        conn,
    )
    return [plain_row(row) for row in rows]


def rows_of_keys(alias: str, table: MovedTable, keys: Sequence[bytes]) -> list[tuple[Any, ...]]:
    """Rows (``columns``) of ``table`` on ``alias`` whose log key is one of ``keys``."""
    conn = shards.connection(alias)
    quote = conn.ops.quote_name
    found: list[tuple[Any, ...]] = []
    for chunk in chunks(list(keys), WRITE_CHUNK):
        rows = shards.read(
            alias,
            f"SELECT {', '.join(quote(c) for c in table.columns)} FROM {quote(table.name)} "
            f"WHERE {quote(table.log_key())} IN ({', '.join(['%s'] * len(chunk))})",
            list(chunk),
        )
        found.extend(plain_row(row) for row in rows)
    return found


def write(alias: str, table: MovedTable, rows: Sequence[Sequence[Any]]) -> None:
    """Insert ``rows`` (``columns``) on ``alias``; a row whose natural key is there already is
    replaced (mutable tables) or left (cells: the same row); an index row replaces a row that
    holds its unique value for another entity."""
    if not rows:
        return
    conn = shards.connection(alias)
    quote = conn.ops.quote_name
    names = [*table.columns, *(name for name, _value in table.marks)]
    cols = ", ".join(quote(c) for c in names)
    one = "(" + ", ".join(["%s"] * len(names)) + ")"
    if table.marks:
        constants = tuple(value for _name, value in table.marks)
        rows = [(*row, *constants) for row in rows]
    others = [c for c in table.columns if c not in table.natural_key]
    if conn.vendor == "mysql":
        if table.mutable:
            verb = "INSERT"
            tail = " ON DUPLICATE KEY UPDATE " + ", ".join(
                f"{quote(c)} = VALUES({quote(c)})" for c in others
            )
        elif table.index is not None:
            # The source is the truth for the buckets: a target row that holds the same unique
            # value for another entity is an older state, and gives way.
            verb, tail = "REPLACE", ""
        else:
            verb, tail = "INSERT IGNORE", ""
    elif table.mutable:
        verb = "INSERT"
        keys = ", ".join(quote(c) for c in table.natural_key)
        sets = ", ".join(f"{quote(c)} = excluded.{quote(c)}" for c in others)
        tail = f" ON CONFLICT ({keys}) DO UPDATE SET {sets}"
    elif table.index is not None:
        verb, tail = "INSERT OR REPLACE", ""
    else:
        verb, tail = "INSERT OR IGNORE", ""
    if conn.vendor != "mysql":  # SQLite keeps datetimes as text: written as Django writes them
        adapt = conn.ops.adapt_datetimefield_value
        rows = [[adapt(v) if isinstance(v, dt.datetime) else v for v in row] for row in rows]
    with shards.errors_named(alias), conn.cursor() as cursor:
        for chunk in chunks(list(rows), WRITE_CHUNK):
            cursor.execute(
                f"{verb} INTO {quote(table.name)} ({cols}) VALUES "
                f"{', '.join([one] * len(chunk))}{tail}",
                [value for row in chunk for value in row],
            )


def delete(alias: str, table: MovedTable, rows: Iterable[Sequence[Any]]) -> int:
    """Delete the rows (``columns``) with these natural keys on ``alias``; how many went."""
    conn = shards.connection(alias)
    quote = conn.ops.quote_name
    positions = [table.columns.index(c) for c in table.natural_key]
    keys = [tuple(row[p] for p in positions) for row in rows]
    if not keys:
        return 0
    names = ", ".join(quote(c) for c in table.natural_key)
    one = "(" + ", ".join(["%s"] * len(positions)) + ")"
    deleted = 0
    with shards.errors_named(alias), conn.cursor() as cursor:
        for chunk in chunks(keys, WRITE_CHUNK):
            cursor.execute(
                f"DELETE FROM {quote(table.name)} WHERE ({names}) IN "
                f"({', '.join([one] * len(chunk))})",
                [value for key in chunk for value in key],
            )
            deleted += cursor.rowcount
    return deleted
