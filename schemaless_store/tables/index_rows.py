"""Index tables: ``index_<name>(<property columns>, entity_id)``, one per index on every shard.

A row lives on the shard that owns the bucket of its ``shard_on`` value (:func:`group`).
Writes go through the shard's *index writer* connection (autocommit on MariaDB, see
:mod:`~schemaless_store.topology.shards`); inserts are idempotent, so a retried or repeated
write never fails on a row that is already there.
"""

from __future__ import annotations

import contextlib
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from django.db import DatabaseError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from ..config.indexes import Index
from ..exceptions import ShardUnavailable
from ..sql import dialects, keyset, literals, sessions
from ..sql.values import plain_row
from ..topology import bucket_map, shards
from . import buckets
from .entities import chunks, delete_matching, keys_where

# (index, column values, entity id)
Row = tuple[Index, tuple[Any, ...], bytes]
# Which of these buckets a writer's connection may not write (the write fence: the writers pass
# ``topology.fence.refused``, so this layer spells statements and never decides ownership).
Refusal = Callable[[BaseDatabaseWrapper, set[int] | list[int]], frozenset[int]]
# Rows per DELETE statement (row-value IN lists).
DELETE_CHUNK = 200


def columns(index: Index, quote: Callable[[str], str]) -> list[str]:
    return [quote(c) for c in (*index.properties, "entity_id")]


def bucket(index: Index, values: Sequence[Any]) -> int:
    """The bucket of the row with these column values (the entity id after them or not)."""
    return bucket_map.bucket_for(index.routing_key(values[index.shard_position]))


def home(index: Index, values: Sequence[Any]) -> str:
    """The alias that holds the row with these column values."""
    return bucket_map.alias_for(index.routing_key(values[index.shard_position]))


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
            alias = routed[key] = bucket_map.alias_for(index.routing_key(value))
        groups[index, alias].append((*values, entity_id))
    return groups


# --- inserts -----------------------------------------------------------------------------------


def insert(
    index: Index, alias: str, rows: Sequence[tuple[Any, ...]], refused_by: Refusal
) -> list[tuple[Any, ...]]:
    """Insert ``(*values, entity_id)`` rows of ``index`` on ``alias``, idempotently, batched, only
    where the shard serves their bucket. Returns the rows it refused (their buckets moved away
    or are being flipped): they belong on another shard.

    MariaDB: the writer's ``refused_by`` (the fence, ``topology.fence.refused``) names the buckets
    the index writer's connection may not write, and the rows served are one plain multi-row
    ``INSERT``. SQLite (whose writes the store serializes):
    one statement that joins the rows to the bucket table (:func:`.buckets.served_insert`)."""
    conn = shards.index_connection(alias)
    placed = _with_buckets(index, rows)
    with shards.errors_named(alias):
        if dialects.of(conn).fence_by_kill:  # the buckets are checked in the client
            refused = refused_by(conn, {row[-1] for row in placed})
            _insert_mysql(index, conn, [row[:-1] for row in placed if row[-1] not in refused])
            return [row[:-1] for row in placed if row[-1] in refused]
        served = _insert_sqlite(index, conn, placed)
    if served >= len(rows):
        return []
    # Fewer rows than sent: some were there already (SQLite counts only new rows), or the
    # shard does not serve their buckets. Its bucket table says which.
    serving = set(buckets.states(alias, sorted({row[-1] for row in placed})).items())
    ok = {number for number, state in serving if state in buckets.SERVING}
    return [row[:-1] for row in placed if row[-1] not in ok]


def insert_on(
    alias: str, groups: Sequence[tuple[Index, Sequence[tuple[Any, ...]]]], refused_by: Refusal
) -> list[tuple[Index, tuple[Any, ...]]]:
    """:func:`insert` for the rows of several indexes on one shard, ``[(index, rows)]``:
    returns the ``(index, row)`` pairs refused. On MariaDB the buckets are checked once, and the
    statements of every index go to the server in one round trip (a multi-statement query on
    the index writer, whose statements are all the store's own, their values typed literals)."""
    conn = shards.index_connection(alias)
    if not dialects.of(conn).driver_route or len(groups) == 1:
        return [
            (index, row) for index, rows in groups for row in insert(index, alias, rows, refused_by)
        ]
    placed = [(index, _with_buckets(index, rows)) for index, rows in groups]
    statements: list[str] = []
    refused: list[tuple[Index, tuple[Any, ...]]] = []
    with shards.errors_named(alias):
        denied = refused_by(conn, {row[-1] for _i, rows in placed for row in rows})
        for index, rows in placed:
            ok = [row[:-1] for row in rows if row[-1] not in denied]
            refused.extend((index, row[:-1]) for row in rows if row[-1] in denied)
            plain = _mysql_insert(index, conn.ops.quote_name)
            if plain is None:
                _insert_mysql(index, conn, ok)  # the driver renders these: a statement apart
            elif ok:
                statements.extend(plain.statements(ok))
        _run_together(conn, statements)
    return refused


def _run_together(conn: BaseDatabaseWrapper, statements: list[str]) -> None:
    """Send ``statements`` in as few round trips as fit :data:`literals.MAX_STATEMENT_BYTES`."""
    batch: list[str] = []
    size = 0
    with shards.statement_cursor(conn) as cursor:
        if len(statements) > 1:
            _allow_many(conn)
        for sql in statements:
            if batch and size + len(sql) + 1 > literals.MAX_STATEMENT_BYTES:
                _execute_all(cursor, batch)
                batch, size = [], 0
            batch.append(sql)
            size += len(sql) + 1
        if batch:
            _execute_all(cursor, batch)


def _execute_all(cursor: Any, statements: list[str]) -> None:
    cursor.execute(";".join(statements))
    while cursor.nextset():  # every statement's result (an error raises here)
        pass


def _allow_many(conn: BaseDatabaseWrapper) -> None:
    with conn.wrap_database_errors:
        sessions.allow_many_statements(conn.connection)


def _insert_sqlite(index: Index, conn: BaseDatabaseWrapper, placed: list[tuple[Any, ...]]) -> int:
    quote = conn.ops.quote_name
    head, tail = _insert_text(index, quote, idempotent=True)
    one = _placeholders(index)
    served = 0
    with shards.statement_cursor(conn) as cursor:
        for chunk in chunks(placed, SQLITE_CHUNK):
            cursor.execute(
                head + ", ".join([one] * len(chunk)) + tail,
                [value for row in chunk for value in row],
            )
            served += max(cursor.rowcount, 0)
    return served


def _insert_mysql(index: Index, conn: BaseDatabaseWrapper, rows: list[tuple[Any, ...]]) -> None:
    """The idempotent multi-row ``INSERT`` of ``(*values, entity_id)`` rows (autocommit)."""
    if not rows:
        return
    quote = conn.ops.quote_name
    with shards.statement_cursor(conn) as cursor:
        plain = _mysql_insert(index, quote)
        if plain is not None:
            for sql in plain.statements(rows):
                cursor.execute(sql)
        else:
            head, tail = _plain_insert_text(index, quote)
            marks = ", ".join(["%s"] * (len(index.properties) + 1))
            cursor.executemany(f"{head}VALUES ({marks}){tail}", rows)


# Rows per statement where the driver renders the values (SQLite's 32766 variables).
SQLITE_CHUNK = 200


def _with_buckets(index: Index, rows: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """``(*values, entity_id, bucket)``: each row with the bucket of its ``shard_on`` value."""
    position = index.shard_position
    found: dict[tuple[type, Any], int] = {}
    placed = []
    for row in rows:
        value = row[position]
        key = (type(value), value)
        number = found.get(key)
        if number is None:
            number = found[key] = bucket(index, row)
        placed.append((*row, number))
    return placed


# Per index object (a redeclared index is another object; one no longer referenced drops out):
# its multi-row INSERT on MariaDB.
_MYSQL_INSERT: weakref.WeakKeyDictionary[Index, literals.Insert | None] = (
    weakref.WeakKeyDictionary()
)


def _mysql_insert(index: Index, quote: Callable[[str], str]) -> literals.Insert | None:
    """The idempotent multi-row ``INSERT`` of ``index`` on MariaDB, its rows written as literals
    (:mod:`..sql.literals`); None when a column type does not say what its values are (then the
    driver renders them)."""
    try:
        return _MYSQL_INSERT[index]
    except KeyError:
        pass
    types = [index.columns[p].python_type for p in index.properties]
    found = None
    known = [t for t in types if t in literals.TYPES]
    if len(known) == len(types):
        head, tail = _plain_insert_text(index, quote)
        found = literals.Insert(head + "VALUES ", literals.RowFormat([*known, bytes]), tail)
    _MYSQL_INSERT[index] = found
    return found


def _plain_insert_text(index: Index, quote: Callable[[str], str]) -> tuple[str, str]:
    """MariaDB's idempotent ``INSERT`` of ``index`` around its ``(*values, entity_id)`` rows."""
    entity = quote("entity_id")
    return (
        f"INSERT INTO {quote(index.name)} ({', '.join(columns(index, quote))}) ",
        f" ON DUPLICATE KEY UPDATE {entity} = {entity}",
    )


def _insert_text(index: Index, quote: Callable[[str], str], *, idempotent: bool) -> tuple[str, str]:
    """SQLite's ``INSERT`` of ``index`` around its ``(*values, entity_id, bucket)`` rows."""
    return buckets.served_insert(quote(index.name), columns(index, quote), idempotent=idempotent)


def _placeholders(index: Index) -> str:
    """One ``(*values, entity_id, bucket)`` row of placeholders."""
    return "(" + ", ".join(["%s"] * (len(index.properties) + 2)) + ")"


# --- unique claims -----------------------------------------------------------------------------


def claim(
    index: Index, alias: str, values: Sequence[Any], entity_id: bytes, refused_by: Refusal
) -> bool:
    """Insert one row of a unique index, not idempotently: ``IntegrityError`` if taken. False
    if the shard does not serve the row's bucket (it belongs on another shard now; on MariaDB
    ``refused_by`` says so, as in :func:`insert`)."""
    conn = shards.index_connection(alias)
    quote = conn.ops.quote_name
    row = _with_buckets(index, [(*values, entity_id)])[0]
    if dialects.of(conn).fence_by_kill:
        with shards.errors_named(alias):
            if refused_by(conn, [row[-1]]):
                return False
        marks = ", ".join(["%s"] * (len(index.properties) + 1))
        sql = f"INSERT INTO {quote(index.name)} ({', '.join(columns(index, quote))}) "
        sql, params = f"{sql}VALUES ({marks})", list(row[:-1])
    else:
        head, tail = _insert_text(index, quote, idempotent=False)
        sql, params = f"{head}{_placeholders(index)}{tail}", list(row)
    # On SQLite the claim shares the entity's transaction: a savepoint keeps it usable.
    savepoint = (
        transaction.atomic(using=alias) if conn.in_atomic_block else contextlib.nullcontext()
    )
    with shards.errors_named(alias), savepoint, conn.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount > 0


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
    columns = [quote(p) for p in index.properties]
    names = ", ".join(columns)
    found: dict[tuple[Any, ...], bytes] = {}
    for chunk in chunks(list(dict.fromkeys(values)), DELETE_CHUNK):
        rows = shards.read(
            alias,
            f"SELECT {names}, {quote('entity_id')} FROM {quote(index.name)} "
            f"WHERE {keys_where(columns, len(chunk))}",
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
    quote = conn.ops.quote_name
    with shards.errors_named(alias), conn.cursor() as cursor:
        return delete_matching(
            cursor, quote(index.name), columns(index, quote), list(rows), DELETE_CHUNK
        )


def delete_not_held(index: Index, alias: str, rows: Sequence[tuple[Any, ...]]) -> int:
    """Delete these exact rows from the table on ``alias`` where ``alias``'s own bucket table
    holds their bucket in no state, or as ``gone``: the cleaner's sweep of rows it found on the
    wrong shard by a map that may be old (docs/cleaner.md). The states are read in the
    ``DELETE``'s transaction, after the shard's generation row is locked: a change of states
    (a move starting, flipping, aborting: :func:`.buckets.set_states`) bumps that row in its
    own transaction, so it waits for this one, or this one reads its states. Returns the
    number deleted."""
    placed = [(row, bucket(index, row)) for row in rows]
    if not placed:
        return 0
    wanted = sorted({number for _row, number in placed})
    conn = shards.connection(alias)
    quote = conn.ops.quote_name
    lock = dialects.of(conn).for_update
    with shards.errors_named(alias), transaction.atomic(using=alias), conn.cursor() as cursor:
        cursor.execute(f"SELECT generation FROM {buckets.GENERATION_TABLE} WHERE id = 1{lock}")
        found = buckets.states_in(cursor, wanted)
        held = {number for number, state in found.items() if state != buckets.GONE}
        doomed = [row for row, number in placed if number not in held]
        if not doomed:
            return 0
        return delete_matching(
            cursor, quote(index.name), columns(index, quote), doomed, DELETE_CHUNK
        )


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
    sql, params = keyset.page(", ".join(names), conn.ops.quote_name(index.name), names, last, limit)
    rows = shards.read(alias, sql, params)
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
