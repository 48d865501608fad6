"""The ``entities`` table, and ``cell_head`` through the same shape (a
:class:`~schemaless_store.config.indexes.Source`: ``added_id``, a 16-byte key, ``updated``,
``body``).

The write path locks and writes rows here, the read path fetches them by id, the cleaner walks
them (by ``added_id``, newest ``updated`` first) with plain reads that never block a writer.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from django.db import DatabaseError

from ..config import conf
from ..config.indexes import ENTITIES, Source
from ..sql.values import UPDATED_TEXT, as_param
from ..topology import bucket_map, shards
from . import buckets, receipts

# ``updated`` as text: fromisoformat() in C reads it several times faster than mysqlclient builds
# a datetime from the DATETIME column (sql/values.py, datetime_converter).
ENTITY_COLUMNS = f"added_id, id, {UPDATED_TEXT}, body"
_SELECT_ONE = f"SELECT {ENTITY_COLUMNS} FROM entities WHERE id = %s"
INSERT = "INSERT INTO entities (id, updated, body) VALUES (%s, %s, %s)"
# The session's @schemaless_added_id: a new row's added_id kept by insert_now (for the receipt
# and the answer), or a partial update's (tables/json_updates.KEEP_APPLIED).
KEPT_ADDED_ID = "SELECT @schemaless_added_id"
UPDATE = "UPDATE entities SET updated = %s, body = %s WHERE id = %s"
DELETE = "DELETE FROM entities WHERE id = %s"
# A body as MariaDB's JSON functions read it (JSON_VALUE(JSON_BODY, '$.user_id')): a JSON body's
# text after its format byte (values/jsonbody.py), as utf8mb4 text (on the BLOB itself they
# answer binary strings); NULL for a body in a MessagePack format.
JSON_BODY = "IF(LEFT(body, 1) = x'03', CONVERT(SUBSTRING(body, 2) USING utf8mb4), NULL)"
FENCED_INSERT = (
    f"INSERT INTO entities (id, updated, body) SELECT %s, %s, %s FROM {buckets.TABLE} "
    f"WHERE bucket = %s AND state IN ({', '.join(str(s) for s in buckets.SERVING)})"
)
# Keys per IN (...) list of a locking or a checking read.
CHUNK = 500

# A row read by the cleaner: (added_id, key, updated as text, body or None).
EntityRow = tuple[int, bytes, Any, bytes | None]


class Locked(NamedTuple):
    """A row read under ``SELECT ... FOR UPDATE``: locked until the transaction ends."""

    added_id: int
    body: bytes | None
    version: int | None  # cell_head's ref_key; None for entities
    # When the row was last written, as text (``UPDATED_TEXT``): a move keeps it, where it
    # gives the row a new added_id (:mod:`..values.expected`).
    updated: str | None = None


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


# Hot-path statements, built once per shape (the table, its columns, how many keys; issue 45).
SHAPES = 1024


def keys_where(columns: Sequence[str], count: int) -> str:
    """The condition that matches ``count`` keys of ``columns`` (quoted already), with a
    ``%s`` for each value, key by key.

    One key is ``a = %s AND b = %s``: MariaDB 10.11 runs a row ``IN`` with a single tuple,
    ``(a, b) IN ((%s, %s))``, as a full scan (``EXPLAIN``: ``ALL``), and with two tuples or
    more as a range on the key (tests/queries/test_statement_plans.py)."""
    if count == 1:
        return " AND ".join(f"{name} = %s" for name in columns)
    one = "(" + ", ".join(["%s"] * len(columns)) + ")"
    return f"({', '.join(columns)}) IN ({', '.join([one] * count)})"


def delete_matching(
    cursor: Any, table: str, columns: Sequence[str], keys: Sequence[Sequence[Any]], size: int
) -> int:
    """``DELETE FROM table WHERE`` the keys (:func:`keys_where`), ``size`` keys a statement
    (``table`` and ``columns`` quoted already); the number of rows deleted."""
    deleted = 0
    columns = tuple(columns)
    for chunk in chunks(keys, size):
        cursor.execute(
            _delete_sql(table, columns, len(chunk)), [value for key in chunk for value in key]
        )
        deleted += cursor.rowcount
    return deleted


@functools.lru_cache(maxsize=SHAPES)
def _delete_sql(table: str, columns: tuple[str, ...], count: int) -> str:
    return f"DELETE FROM {table} WHERE {keys_where(columns, count)}"


# --- the read path -----------------------------------------------------------------------------


def select_one(alias: str, key: bytes, conn: Any = None) -> tuple[Any, ...] | None:
    """``(added_id, id, updated, body)`` of one entity, or None: one ``SELECT``."""
    rows = shards.read(alias, _SELECT_ONE, (key,), conn)
    return rows[0] if rows else None


def committed_body(alias: str, key: bytes) -> bytes | None:
    """The body of one entity as last committed, read outside this thread's open transaction
    on ``alias`` (:func:`shards.committed_reader`); None if it does not exist."""
    with shards.committed_reader(alias) as conn:
        row = select_one(alias, key, conn)
    return None if row is None or row[3] is None else bytes(row[3])


def select_by_ids(alias: str, ids: Sequence[bytes]) -> Iterator[tuple[Any, ...]]:
    """``(added_id, id, updated, body)`` of the entities among ``ids`` on ``alias``, one
    ``IN (...)`` query per ``SCHEMALESS["FETCH_BATCH"]`` ids."""
    for chunk in chunks(ids, conf.get().fetch_batch):
        yield from shards.read(alias, _select_by_ids_sql(len(chunk)), chunk)


@functools.lru_cache(maxsize=SHAPES)
def _select_by_ids_sql(count: int) -> str:
    return f"SELECT {ENTITY_COLUMNS} FROM entities WHERE id IN ({', '.join(['%s'] * count)})"


# --- the write path ----------------------------------------------------------------------------


def lock(
    alias: str, keys: Sequence[bytes], source: Source = ENTITIES, conn: Any = None, first: str = ""
) -> dict[bytes, Locked]:
    """The rows of ``keys`` that exist, read with ``FOR UPDATE`` in the open transaction (on
    ``conn``, the alias's connection, when the caller has it). ``first``: statements that go
    before the read in its query (``"BEGIN; "``: the transaction opens with it, in one round
    trip); their answers carry no rows."""
    if conn is None:
        conn = shards.connection(alias)
    for_update = conn.features.has_select_for_update
    extra_params = source.where()[1]
    found: dict[bytes, Locked] = {}
    with shards.statement_cursor(conn) as cursor:
        for chunk in chunks(keys, CHUNK):
            cursor.execute(
                _lock_sql(source, len(chunk), first, for_update), [*chunk, *extra_params]
            )
            for _statement in range(first.count(";")):
                cursor.nextset()  # past the answers of ``first``'s statements, to the read's
            first = ""
            for key, added_id, body, ref_key, updated in cursor.fetchall():
                found[bytes(key)] = Locked(
                    added_id, None if body is None else bytes(body), ref_key, updated
                )
    return found


@functools.lru_cache(maxsize=SHAPES)
def _lock_sql(source: Source, count: int, first: str, for_update: bool) -> str:
    """:func:`lock`'s statement for ``count`` keys of ``source``, after ``first``."""
    version = source.version_column or "NULL"
    return (
        f"{first}SELECT {source.id_column}, added_id, body, {version}, {UPDATED_TEXT} "
        f"FROM {source.table} WHERE {source.id_column} IN ({', '.join(['%s'] * count)})"
        f"{source.where()[0]}{' FOR UPDATE' if for_update else ''}"
    )


def touch(alias: str, keys: Sequence[bytes], source: Source = ENTITIES) -> None:
    """Write the rows of ``keys`` in the open transaction without changing them: ``updated``
    a microsecond on and back, two row changes that put the rows in the transaction's write
    set. On Galera, certification then orders the transaction against any write of the same
    rows through another node (whose row locks are that node's own)."""
    extra, extra_params = source.where()
    with shards.statement_cursor(shards.connection(alias)) as cursor:
        for chunk in chunks(keys, CHUNK):
            marks = ", ".join(["%s"] * len(chunk))
            for sign in ("+", "-"):
                cursor.execute(
                    f"UPDATE {source.table} SET updated = updated {sign} INTERVAL 1 MICROSECOND "
                    f"WHERE {source.id_column} IN ({marks}){extra}",
                    [*chunk, *extra_params],
                )


def insert_one(cursor: Any, key: bytes, updated: Any, body: bytes) -> int:
    """Insert one entity; its ``added_id``."""
    cursor.execute(INSERT, (key, updated, body))
    return int(cursor.lastrowid)


def insert_one_fenced(
    cursor: Any, key: bytes, updated: Any, body: bytes, bucket: int
) -> int | None:
    """SQLite: insert one entity only if this shard serves ``bucket``: the write protocol's
    step 0 and the insert in one statement. Its ``added_id``, or None if the shard does not
    serve the bucket."""
    try:
        cursor.execute(FENCED_INSERT, (key, updated, body, bucket))
    except DatabaseError as exc:
        if buckets.no_table(exc):  # the shard was never migrated: say what to run
            raise buckets.not_migrated(str(getattr(cursor.db, "alias", "?"))) from exc
        raise
    if cursor.rowcount < 1:
        return None
    return int(cursor.lastrowid)


def write_many(
    cursor: Any,
    inserts: Sequence[tuple[bytes, Any, bytes]],
    updates: Sequence[tuple[Any, bytes, bytes]],
) -> None:
    """``inserts``: ``(id, updated, body)``; ``updates``: ``(updated, body, id)``."""
    if inserts:
        cursor.executemany(INSERT, inserts)
    if updates:
        cursor.executemany(UPDATE, updates)


def update_one(cursor: Any, key: bytes, updated: Any, body: bytes) -> None:
    cursor.execute(UPDATE, (updated, body, key))


def insert_now(conn: Any, first: str, key: bytes, updated: Any, body: bytes) -> None:
    """A new row's ``INSERT``, sent at once in the open transaction (``first``: ``"BEGIN; "``
    when it opens it, in the same round trip), its ``added_id`` kept in the session's
    ``@schemaless_added_id`` (what :data:`..tables.receipts.ADDED_ID` and
    :data:`KEPT_ADDED_ID` read later). A duplicate key raises here."""
    with shards.statement_cursor(conn) as cursor:
        cursor.execute(f"{first}{INSERT}; {receipts.KEEP_ADDED_ID.decode()}", [key, updated, body])
        while cursor.nextset():  # each statement's answer read: an error raises here
            pass


def delete_one(cursor: Any, key: bytes) -> int:
    cursor.execute(DELETE, (key,))
    return int(cursor.rowcount)


# --- the cleaner's walks (plain reads: they never block a writer) ------------------------------


def _rows(alias: str, sql: str, params: Sequence[Any]) -> list[EntityRow]:
    return [
        (added_id, bytes(key), updated, None if body is None else bytes(body))
        for added_id, key, updated, body in shards.read(alias, sql, list(params))
    ]


def after(source: Source, alias: str, last: int, upto: int, limit: int) -> list[EntityRow]:
    """Rows with ``last < added_id <= upto``, by ``added_id`` (a backfill's batch)."""
    extra, params = source.where()
    return _rows(
        alias,
        f"SELECT added_id, {source.id_column}, {UPDATED_TEXT}, body FROM {source.table} "
        f"WHERE added_id > %s AND added_id <= %s{extra} ORDER BY added_id LIMIT {int(limit)}",
        [last, upto, *params],
    )


def newest_first(
    source: Source, alias: str, bound: tuple[Any, int] | None, limit: int
) -> list[EntityRow]:
    """Rows by ``updated`` then ``added_id``, descending, after ``bound`` (a repair's batch)."""
    where, params = newest_first_after(source, alias, bound)
    return _rows(
        alias,
        f"SELECT added_id, {source.id_column}, {UPDATED_TEXT}, body FROM {source.table} "
        f"WHERE {where} ORDER BY updated DESC, added_id DESC LIMIT {int(limit)}",
        params,
    )


def newest_first_after(
    source: Source, alias: str, bound: tuple[Any, int] | None
) -> tuple[str, list[Any]]:
    """The condition of :func:`newest_first`'s rows after ``bound``, with its parameters."""
    extra, params = source.where()
    where = f"1 = 1{extra}"
    if bound is not None:
        updated = as_param(shards.connection(alias), bound[0])
        # The leading "<=" lets the server seek the updated index; the OR breaks ties.
        where += " AND updated <= %s AND (updated < %s OR added_id < %s)"
        params = [*params, updated, updated, bound[1]]
    return where, params


def current(source: Source, keys: Iterable[bytes]) -> dict[bytes, tuple[int, Any, bytes | None]]:
    """``{key: (added_id, updated as text, body)}`` of the keys that exist, on the shards that
    own them (read without locks)."""
    extra, extra_params = source.where()
    by_alias: dict[str, list[bytes]] = defaultdict(list)
    for key in keys:
        by_alias[bucket_map.alias_for(key)].append(key)
    found: dict[bytes, tuple[int, Any, bytes | None]] = {}
    for alias, alias_keys in by_alias.items():
        for chunk in chunks(alias_keys, CHUNK):
            marks = ", ".join(["%s"] * len(chunk))
            for added_id, key, updated, body in _rows(
                alias,
                f"SELECT added_id, {source.id_column}, {UPDATED_TEXT}, body FROM {source.table} "
                f"WHERE {source.id_column} IN ({marks}){extra}",
                [*chunk, *extra_params],
            ):
                found[key] = (added_id, updated, body)
    return found


def versions(source: Source, alias: str, added_ids: Iterable[int]) -> dict[bytes, tuple[int, Any]]:
    """``{key: (added_id, updated as text)}`` of these rows now: an ``added_id`` range when
    they are (nearly) contiguous, as a backfill batch is, else ``added_id`` lookups."""
    wanted = sorted(set(added_ids))
    found: dict[bytes, tuple[int, Any]] = {}
    if not wanted:
        return found
    low, high = wanted[0], wanted[-1]
    if high - low < 2 * len(wanted):
        queries = [("added_id BETWEEN %s AND %s", [low, high])]
    else:
        queries = [
            (f"added_id IN ({', '.join(['%s'] * len(chunk))})", list(chunk))
            for chunk in chunks(wanted, CHUNK)
        ]
    extra, extra_params = source.where()
    for where, params in queries:
        rows = shards.read(
            alias,
            f"SELECT {source.id_column}, added_id, {UPDATED_TEXT} FROM {source.table} "
            f"WHERE {where}{extra}",
            [*params, *extra_params],
        )
        found.update((bytes(key), (added_id, updated)) for key, added_id, updated in rows)
    return found


def max_added_id(source: Source, alias: str) -> int:
    extra, params = source.where()
    rows = shards.read(
        alias, f"SELECT MAX(added_id) FROM {source.table} WHERE 1 = 1{extra}", params
    )
    return int(rows[0][0] or 0)


def count(source: Source, alias: str, upto: int | None = None, since: Any = None) -> int:
    """Rows on ``alias`` (with ``added_id <= upto``, and ``updated >= since``, if given)."""
    extra, params = source.where()
    bound = "" if upto is None else " AND added_id <= %s"
    bounds = [] if upto is None else [upto]
    if since is not None:
        bound += " AND updated >= %s"
        bounds.append(as_param(shards.connection(alias), since))
    rows = shards.read(
        alias,
        f"SELECT COUNT(*) FROM {source.table} WHERE 1 = 1{bound}{extra}",
        bounds + params,
    )
    return int(rows[0][0])


def exists(source: Source, alias: str) -> bool:
    extra, params = source.where()
    rows = shards.read(alias, f"SELECT 1 FROM {source.table} WHERE 1 = 1{extra} LIMIT 1", params)
    return bool(rows)


def by_added_id(alias: str, after: int, limit: int, offset: int = 0) -> list[tuple[Any, ...]]:
    """``(added_id, id, updated, body)`` of the entities on ``alias`` after ``added_id``
    ``after``, in ``added_id`` order, skipping ``offset`` of them."""
    skip = f" OFFSET {int(offset)}" if offset else ""
    return shards.read(
        alias,
        f"SELECT {ENTITY_COLUMNS} FROM entities WHERE added_id > %s "
        f"ORDER BY added_id LIMIT {int(limit)}{skip}",
        [after],
    )


def in_key_order(alias: str, after: int, limit: int, since: Any = None) -> list[tuple[Any, ...]]:
    """``(added_id, id, updated, body)`` of the entities on ``alias`` after ``added_id``
    ``after`` (with ``updated >= since``, if given), in ``added_id`` order: an export's chunk.
    The ``added_id`` key is walked either way; ``since`` only filters (the export's order is
    the key's, and one pass over the key costs what one pass over the ``updated`` index
    would)."""
    where, params = "added_id > %s", [after]
    if since is not None:
        where += " AND updated >= %s"
        params.append(as_param(shards.connection(alias), since))
    return shards.read(
        alias,
        f"SELECT {ENTITY_COLUMNS} FROM entities WHERE {where} ORDER BY added_id LIMIT {int(limit)}",
        params,
    )
