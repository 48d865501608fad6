"""What a bucket move copies: every table of a shard, with the column that places each row in a
bucket, the key that names a row, and the statements that read, write and delete rows in bulk.

``entities`` rows sit in the bucket of their ``id``, ``cell`` and ``cell_head`` rows in that of
their ``row_key``, and index rows in that of their ``shard_on`` value. A moved row gets the
target's own auto-increment key (``added_id``, ``added_at``); everything else is copied as is.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from ..config import conf
from ..config.indexes import Index, registry
from ..sql import dialects, keyset, literals
from ..sql.values import plain_row
from ..topology import shards
from ..values.bucket_hash import buckets_of
from . import buckets as bucket_table
from .entities import chunks, delete_matching, keys_where

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
        """The bucket of a row of ``columns``."""
        return self.buckets_of([row[self.columns.index(self.routed_by)]])[0]

    def buckets_of(self, values: Sequence[Any]) -> list[int]:
        """The buckets of values of the ``routed_by`` column."""
        count = conf.get().buckets
        if self.index is None:
            return buckets_of([bytes(value) for value in values], count)
        route, keys = self.index.routing_key, dict[Any, bytes]()
        plain = [bytes(v) if isinstance(v, bytearray | memoryview) else v for v in values]
        for value in plain:  # index rows share values (a user's rows): each encoded once
            if value not in keys:
                keys[value] = route(value)
        return buckets_of([keys[value] for value in plain], count)

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


@dataclass(frozen=True)
class Page:
    """One step of a walk: the rows read in the moving buckets, and where the walk is."""

    rows: list[tuple[Any, ...]]  # the ``names`` asked for, of the rows in the buckets
    read: int  # rows read (in any bucket)
    last: tuple[Any, ...] | None  # the walk key of the last row read; None: the walk is over


def page(
    alias: str,
    table: MovedTable,
    after: Sequence[Any] | None,
    limit: int,
    numbers: set[int],
    *,
    names: Sequence[str] | None = None,
    conn: BaseDatabaseWrapper | None = None,
) -> Page:
    """The rows of ``table`` on ``alias`` in buckets ``numbers`` among the next ``limit`` in
    walk order after ``after`` (on ``conn``, if given: a snapshot's), as their ``names``
    columns (default ``columns``).

    No column holds a row's bucket, so the walk reads every row, but only its key and routing
    column; the other columns (an entity's body) are read for the rows in the buckets alone,
    by their walk keys (a row deleted in between is left out: the change log has it)."""
    conn = conn or shards.connection(alias)
    quote = conn.ops.quote_name
    width = len(table.walk_key)
    narrow = [
        *table.walk_key,
        *([table.routed_by] if table.routed_by not in table.walk_key else []),
    ]
    walk_cols = [quote(c) for c in table.walk_key]
    sql, params = keyset.page(
        ", ".join(quote(c) for c in narrow), quote(table.name), walk_cols, after, limit
    )
    rows = shards.read(alias, sql, params, conn)
    if not rows:
        return Page([], 0, None)
    routed = narrow.index(table.routed_by)
    found = table.buckets_of([row[routed] for row in rows])
    inside = [plain_row(row) for row, number in zip(rows, found, strict=True) if number in numbers]
    names = tuple(names or table.columns)
    if set(names) <= set(narrow):
        positions = [narrow.index(name) for name in names]
        picked = [tuple(row[p] for p in positions) for row in inside]
    else:
        picked = rows_at(alias, table, [row[:width] for row in inside], names, conn)
    return Page(picked, len(rows), tuple(plain_row(rows[-1][:width])))


def rows_at(
    alias: str,
    table: MovedTable,
    keys: Sequence[Sequence[Any]],
    names: Sequence[str],
    conn: BaseDatabaseWrapper | None = None,
) -> list[tuple[Any, ...]]:
    """The ``names`` columns of the rows of ``table`` with these walk keys."""
    conn = conn or shards.connection(alias)
    quote = conn.ops.quote_name
    key_cols = [quote(c) for c in table.walk_key]
    selected = ", ".join(quote(c) for c in names)
    found: list[tuple[Any, ...]] = []
    for chunk in chunks(list(keys), WRITE_CHUNK * 5):
        rows = shards.read(
            alias,
            f"SELECT {selected} FROM {quote(table.name)} WHERE {keys_where(key_cols, len(chunk))}",
            [value for key in chunk for value in key],
            conn,
        )
        found.extend(plain_row(row) for row in rows)
    return found


def rows_of_keys(
    alias: str,
    table: MovedTable,
    keys: Sequence[bytes],
    conn: BaseDatabaseWrapper | None = None,
) -> list[tuple[Any, ...]]:
    """Rows (``columns``) of ``table`` on ``alias`` whose log key is one of ``keys`` (read on
    ``conn``, if given: a snapshot's)."""
    conn = conn or shards.connection(alias)
    quote = conn.ops.quote_name
    found: list[tuple[Any, ...]] = []
    for chunk in chunks(list(keys), WRITE_CHUNK):
        rows = shards.read(
            alias,
            f"SELECT {', '.join(quote(c) for c in table.columns)} FROM {quote(table.name)} "
            f"WHERE {quote(table.log_key())} IN ({', '.join(['%s'] * len(chunk))})",
            list(chunk),
            conn,
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
    dialect = dialects.of(conn)
    if table.mutable:
        verb, tail = "INSERT", dialect.upsert(quote, table.natural_key, others)
    elif table.index is not None:
        # The source is the truth for the buckets: a target row that holds the same unique
        # value for another entity is an older state, and gives way.
        verb, tail = dialect.insert_or_replace, ""
    else:
        verb, tail = dialect.insert_ignore, ""
    if dialect.datetimes_as_text:  # written as Django writes them
        adapt = conn.ops.adapt_datetimefield_value
        rows = [[adapt(v) if isinstance(v, dt.datetime) else v for v in row] for row in rows]
    head = f"{verb} INTO {quote(table.name)} ({cols}) VALUES "
    rendered = _literal_statements(head, tail, rows) if dialect.literal_rows else None
    with shards.errors_named(alias), conn.cursor() as cursor:
        if rendered is not None:
            for sql in rendered:
                cursor.execute(sql)  # no parameters: the driver does not format it
            return
        for chunk in chunks(list(rows), WRITE_CHUNK):
            cursor.execute(
                f"{head}{', '.join([one] * len(chunk))}{tail}",
                [value for row in chunk for value in row],
            )


def _literal_statements(head: str, tail: str, rows: Sequence[Sequence[Any]]) -> list[str] | None:
    """The rows' ``INSERT`` statements written as literals (:mod:`..sql.literals`), when
    every value has one (entities and index rows; not cells, whose ``column_name`` is text):
    MySQLdb's rendering of each value was a quarter of a copy's time."""
    kinds = [{type(value) for value in column} for column in zip(*rows, strict=True)]
    if not all(len(kind) == 1 and next(iter(kind)) in literals.TYPES for kind in kinds):
        return None
    try:
        row_format = literals.RowFormat([next(iter(kind)) for kind in kinds])
        return list(literals.Insert(head, row_format, tail).statements(rows))
    except (TypeError, ValueError):  # an aware datetime, a NaN: the driver renders them
        return None


def delete(
    alias: str,
    table: MovedTable,
    rows: Iterable[Sequence[Any]],
    names: Sequence[str] | None = None,
) -> int:
    """Delete the rows (their ``names`` columns, default ``columns``) with these natural keys
    on ``alias``; how many went."""
    conn = shards.connection(alias)
    quote = conn.ops.quote_name
    given = tuple(names or table.columns)
    positions = [given.index(c) for c in table.natural_key]
    keys = [tuple(row[p] for p in positions) for row in rows]
    if not keys:
        return 0
    key_cols = [quote(c) for c in table.natural_key]
    with shards.errors_named(alias), conn.cursor() as cursor:
        return delete_matching(cursor, quote(table.name), key_cols, keys, WRITE_CHUNK)


def walk(
    table: MovedTable,
    where: Iterable[tuple[str, set[int], BaseDatabaseWrapper | None]],
    batch: int,
) -> Iterator[tuple[Any, ...]]:
    """Every row of ``table`` in the buckets, over ``(alias, buckets, connection or None)``,
    as its ``columns``, in pages of ``batch``."""
    for alias, numbers, conn in where:
        last: tuple[Any, ...] | None = None
        while True:
            found = page(alias, table, last, batch, numbers, conn=conn)
            if found.last is None:
                break
            yield from found.rows
            last = found.last


def row_hash(values: Sequence[Any]) -> int:
    """A row's 64-bit hash, summed (mod 2**64 or not) into an order-free checksum."""
    return int.from_bytes(hashlib.blake2b(repr(values).encode(), digest_size=8).digest(), "big")


def digest(
    table: MovedTable,
    where: Iterable[tuple[str, set[int], BaseDatabaseWrapper | None]],
    skip: set[bytes],
    batch: int,
) -> tuple[int, int]:
    """(rows, order-free checksum) of ``table``'s rows in the buckets, over ``(alias, buckets,
    connection or None)``, but for those whose log key is in ``skip``: what a move's
    verification compares between the sources and the target."""
    count, total = 0, 0
    keyed = table.columns.index(table.log_key())
    for values in walk(table, where, batch):
        if bytes(values[keyed]) not in skip:
            count += 1
            total = (total + row_hash(values)) % 2**64
    return count, total


def snapshot(alias: str) -> BaseDatabaseWrapper:
    """A connection of its own to ``alias`` reading the shard as of now until it is closed."""
    conn = connections.create_connection(alias)
    with conn.cursor() as cursor:
        dialect = dialects.of(conn)
        for statement in dialect.begin_snapshot:  # MariaDB: the snapshot is taken here
            cursor.execute(statement)
        if not dialect.consistent_snapshot:
            # SQLite's snapshot begins with the first read (one row: not a count of the table)
            cursor.execute(f"SELECT bucket FROM {bucket_table.TABLE} LIMIT 1")
            cursor.fetchall()
    return conn


def encode_key(key: Sequence[Any]) -> list[Any]:
    """A walk key as JSON (a copy's checkpoint in the move's record)."""
    return [{"$b": v.hex()} if isinstance(v, bytes) else v for v in key]


def decode_key(key: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(bytes.fromhex(v["$b"]) if isinstance(v, dict) else v for v in key)
