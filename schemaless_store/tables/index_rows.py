"""Index tables: ``index_<name>(<property columns>, entity_id)``, one per index on every shard.

A row lives on the shard that owns the bucket of its ``shard_on`` value (:func:`group`).
Writes go through the shard's *index writer* connection (autocommit on MySQL, see
:mod:`~schemaless_store.shards`); inserts are idempotent, so a retried or repeated write never
fails on a row that is already there.
"""

from __future__ import annotations

import contextlib
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from django.db import DatabaseError, transaction

from .. import shards
from ..exceptions import ShardUnavailable
from ..indexes import Index
from . import keyset, literals
from .entities import chunks
from .values import plain_row

# (index, column values, entity id)
Row = tuple[Index, tuple[Any, ...], bytes]
# Rows per DELETE statement (row-value IN lists).
DELETE_CHUNK = 200


def columns(index: Index, quote: Callable[[str], str]) -> list[str]:
    return [quote(c) for c in (*index.properties, "entity_id")]


def home(index: Index, values: Sequence[Any]) -> str:
    """The alias that holds the row with these column values."""
    return shards.alias_for(index.routing_key(values[index.shard_position]))


def group(rows: Iterable[Row]) -> dict[tuple[Index, str], list[tuple[Any, ...]]]:
    """Rows as ``(*values, entity_id)`` tuples per (index, the shard that holds them)."""
    groups: dict[tuple[Index, str], list[tuple[Any, ...]]] = defaultdict(list)
    # (type, shard_on column value) -> alias: an entity's indexes often share it. The type is
    # part of the key: True, 1 and 1.0 are equal in Python but route as different values.
    routed: dict[tuple[type, Any], str] = {}
    for index, values, entity_id in rows:
        value = values[index.shard_position]
        key = (type(value), value)
        alias = routed.get(key)
        if alias is None:
            alias = routed[key] = shards.alias_for(index.routing_key(value))
        groups[index, alias].append((*values, entity_id))
    return groups


# --- inserts -----------------------------------------------------------------------------------


def insert(index: Index, alias: str, rows: Sequence[tuple[Any, ...]]) -> None:
    """Insert ``(*values, entity_id)`` rows of ``index`` on ``alias``, idempotently, batched."""
    conn = shards.index_connection(alias)
    quote = conn.ops.quote_name
    with shards.errors_named(alias), shards.statement_cursor(conn) as cursor:
        mysql = _mysql_insert(index, quote) if conn.vendor == "mysql" else None
        if mysql is not None:
            for sql in mysql.statements(rows):
                cursor.execute(sql)
        elif len(rows) == 1:  # executemany's statement rewriting costs more than it saves
            cursor.execute(_insert_sql(index, conn.vendor, quote), rows[0])
        else:
            cursor.executemany(_insert_sql(index, conn.vendor, quote), rows)


# Per index object (a redeclared index is another object; one no longer referenced drops out):
# its multi-row INSERT on MySQL.
_MYSQL_INSERT: weakref.WeakKeyDictionary[Index, literals.Insert | None] = (
    weakref.WeakKeyDictionary()
)


def _mysql_insert(index: Index, quote: Callable[[str], str]) -> literals.Insert | None:
    """The idempotent multi-row ``INSERT`` of ``index`` on MySQL, its rows written as literals
    (:mod:`.literals`); None when a column type does not say what its values are (then the
    driver renders them)."""
    try:
        return _MYSQL_INSERT[index]
    except KeyError:
        pass
    types = [index.columns[p].python_type for p in index.properties]
    found = None
    known = [t for t in types if t in literals.TYPES]
    if len(known) == len(types):
        head, tail = _insert_text(index, "mysql", quote)
        found = literals.Insert(head, literals.RowFormat([*known, bytes]), tail)
    _MYSQL_INSERT[index] = found
    return found


def _insert_text(index: Index, vendor: str, quote: Callable[[str], str]) -> tuple[str, str]:
    """The idempotent ``INSERT`` of ``index`` around its rows: the text before and after."""
    names = ", ".join(columns(index, quote))
    if vendor == "mysql":
        entity_col = quote("entity_id")
        return (
            f"INSERT INTO {quote(index.name)} ({names}) VALUES ",
            f" ON DUPLICATE KEY UPDATE {entity_col} = {entity_col}",
        )
    return f"INSERT OR IGNORE INTO {quote(index.name)} ({names}) VALUES ", ""


_INSERT_SQL: dict[tuple[str, tuple[str, ...], str], str] = {}


def _insert_sql(index: Index, vendor: str, quote: Callable[[str], str]) -> str:
    """The idempotent ``INSERT`` of one row with placeholders, for the driver to fill (SQLite;
    MySQL when a column type does not say what its values are)."""
    key = (index.name, index.properties, vendor)
    sql = _INSERT_SQL.get(key)
    if sql is None:
        head, tail = _insert_text(index, vendor, quote)
        marks = ", ".join(["%s"] * (len(index.properties) + 1))
        sql = _INSERT_SQL[key] = f"{head}({marks}){tail}"
    return sql


# --- unique claims -----------------------------------------------------------------------------


def claim(index: Index, alias: str, values: Sequence[Any], entity_id: bytes) -> None:
    """Insert one row of a unique index, not idempotently: ``IntegrityError`` if taken."""
    conn = shards.index_connection(alias)
    quote = conn.ops.quote_name
    marks = ", ".join(["%s"] * (len(values) + 1))
    sql = f"INSERT INTO {quote(index.name)} ({', '.join(columns(index, quote))}) VALUES ({marks})"
    # On SQLite the claim shares the entity's transaction: a savepoint keeps it usable.
    savepoint = (
        transaction.atomic(using=alias) if conn.in_atomic_block else contextlib.nullcontext()
    )
    with shards.errors_named(alias), savepoint, conn.cursor() as cursor:
        cursor.execute(sql, [*values, entity_id])


def holder(index: Index, alias: str, values: Sequence[Any]) -> bytes | None:
    """The entity id of the row with these column values of a unique index, if any."""
    conn = shards.index_connection(alias)
    quote = conn.ops.quote_name
    match = " AND ".join(f"{quote(p)} = %s" for p in index.properties)
    with shards.errors_named(alias), conn.cursor() as cursor:
        cursor.execute(
            f"SELECT {quote('entity_id')} FROM {quote(index.name)} WHERE {match}", list(values)
        )
        found = cursor.fetchone()
    return None if found is None else bytes(found[0])


def holders(
    index: Index, alias: str, values: Sequence[tuple[Any, ...]]
) -> dict[tuple[Any, ...], bytes]:
    """``{column values: entity id}`` of the rows of a unique index on ``alias`` that hold
    any of ``values`` (read without locks: a preview of what claims would find)."""
    conn = shards.connection(alias)
    quote = conn.ops.quote_name
    names = ", ".join(quote(p) for p in index.properties)
    one = "(" + ", ".join(["%s"] * len(index.properties)) + ")"
    found: dict[tuple[Any, ...], bytes] = {}
    for chunk in chunks(list(dict.fromkeys(values)), DELETE_CHUNK):
        rows = shards.read(
            alias,
            f"SELECT {names}, {quote('entity_id')} FROM {quote(index.name)} "
            f"WHERE ({names}) IN ({', '.join([one] * len(chunk))})",
            [value for row in chunk for value in row],
        )
        for row in rows:
            plain = plain_row(row)
            found[plain[:-1]] = plain[-1]
    return found


# --- deletes -----------------------------------------------------------------------------------


def delete(index: Index, alias: str, rows: Sequence[tuple[Any, ...]]) -> int:
    """Delete these exact ``(*values, entity_id)`` rows from the table on ``alias`` (wherever
    they belong): batched row-value ``IN`` lists. Returns the number deleted."""
    if not rows:
        return 0
    conn = shards.index_connection(alias)
    names = ", ".join(columns(index, conn.ops.quote_name))
    one = "(" + ", ".join(["%s"] * (len(index.properties) + 1)) + ")"
    deleted = 0
    with shards.errors_named(alias), conn.cursor() as cursor:
        for chunk in chunks(rows, DELETE_CHUNK):
            cursor.execute(
                f"DELETE FROM {conn.ops.quote_name(index.name)} WHERE ({names}) IN "
                f"({', '.join([one] * len(chunk))})",
                [value for row in chunk for value in row],
            )
            deleted += cursor.rowcount
    return deleted


# --- reads -------------------------------------------------------------------------------------


def of_entities(
    index: Index, entity_ids: Iterable[bytes], batch: int = 500
) -> set[tuple[Any, ...]]:
    """Every row of ``index``, on any shard, that points at one of ``entity_ids``, as
    ``(values, entity_id)``."""
    ids = list(dict.fromkeys(entity_ids))
    found: set[tuple[Any, ...]] = set()
    if not ids:
        return found
    for alias in shards.shard_aliases():
        conn = shards.connection(alias)
        quote = conn.ops.quote_name
        for chunk in chunks(ids, batch):
            rows = shards.read(
                alias,
                f"SELECT {', '.join(columns(index, quote))} FROM {quote(index.name)} "
                f"WHERE {quote('entity_id')} IN ({', '.join(['%s'] * len(chunk))})",
                list(chunk),
            )
            for row in rows:
                values = plain_row(row)
                found.add((values[:-1], values[-1]))
    return found


def after(
    index: Index, alias: str, last: tuple[Any, ...] | None, limit: int
) -> list[tuple[Any, ...]]:
    """Rows of the table on ``alias`` in primary-key order after ``last`` (a sweep's batch)."""
    conn = shards.connection(alias)
    names = columns(index, conn.ops.quote_name)
    where, params = "", list[Any]()
    if last is not None:
        bound, params = keyset.after(names, last)
        where = f" WHERE {bound}"
    rows = shards.read(
        alias,
        f"SELECT {', '.join(names)} FROM {conn.ops.quote_name(index.name)}{where} "
        f"ORDER BY {', '.join(names)} LIMIT {int(limit)}",
        params,
    )
    return [plain_row(row) for row in rows]


def first(index: Index) -> tuple[Any, ...] | None:
    """The column values of the first row (primary-key order) on the first shard that has one;
    None if no shard that answers has a row."""
    for alias in shards.shard_aliases():
        quote = shards.connection(alias).ops.quote_name
        names = ", ".join(quote(p) for p in index.properties)
        try:
            rows = shards.read(alias, f"SELECT {names} FROM {quote(index.name)} LIMIT 1", ())
        except (ShardUnavailable, DatabaseError):
            continue
        if rows:
            return plain_row(rows[0])
    return None
