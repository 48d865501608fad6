"""Index rows the server reads out of JSON bodies (issue 45): the cleaner's batches without a
body decoded in Python.

For an index whose column types the server can compute exactly (:func:`supported`: ``key``,
``str``, ``int``, ``float``, as declared, not subclassed), each row of a batch gets, from
``JSON_EXTRACT`` / ``JSON_VALUE`` on :data:`~.entities.JSON_BODY`:

- a *Python* flag: the server cannot give this entity's rows exactly the value
  :meth:`Index.rows_for` gives, so its body goes through today's path (decoded in Python). That
  is every body that is not JSON (MessagePack during a rewrite, no body), not valid JSON (or
  nested deeper than MariaDB's 32 levels), not UTF-8 the way Python reads it, not an object, or
  an object with a name twice (MariaDB reads the first, Python the last); and every indexed
  property whose value is a list, an object (a tagged datetime, bytes, UUID, big int, special
  float, or a dict), a string with a ``\\u`` escape, a number beyond JSON's safe integers or
  with a 3-digit exponent, a float
  in a ``key`` column, a value too long for its column, or a type its column refuses;
- the column values, exactly what Python computes (``key``: the order-preserving encoding of
  :func:`~schemaless_store.values.index_values.encode_key` for strings, ints, booleans, null);
- whether the entity has a row at all (not when a property is missing, or a kind index's
  ``kind`` is another).

:func:`read_batch` streams those per entity (the index rows of an entity on any shard, as
``(value, id)`` tuples); :func:`insert_select` writes them with one ``INSERT ... SELECT`` per
chunk, for a shard whose index table serves every bucket (nothing to route in the client).
tests/cleaner/test_server_extraction.py proves the equality on generated bodies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from ..config.indexes import KIND_PROPERTY, Index, Source, is_identifier
from ..sql.values import UPDATED_TEXT
from ..topology import bucket_map, shards
from ..values.index_values import ColumnType, FloatColumn, IntColumn, KeyColumn, StrColumn
from ..values.jsonbody import SAFE_INT
from .entities import JSON_BODY, chunks, newest_first_after
from .index_rows import Refusal

SERVER_TYPES = (KeyColumn, StrColumn, IntColumn, FloatColumn)
_INT_KEY_BYTES = 17  # the number tag, the sortable double, the exact int


class ServerRow(NamedTuple):
    """One entity of a batch as the server read it."""

    added_id: int
    entity_id: bytes
    updated: Any  # as text (``UPDATED_TEXT``)
    python: bool  # its rows must come from its body, decoded in Python
    values: tuple[Any, ...] | None  # its one row's column values; None: no row (or ``python``)


def supported(index: Index) -> bool:
    """Whether the server can compute every column of ``index`` (else: today's path)."""
    return all(type(index.columns[p]) in SERVER_TYPES for p in index.properties) and all(
        is_identifier(p) for p in (*index.properties, KIND_PROPERTY)
    )


def _path(prop: str) -> str:
    if not is_identifier(prop):  # the path is spelled in the statement
        raise ValueError(f"{prop!r} is not a property name the server can be asked for")
    return f"'$.{prop}'"


def _extract(prop: str) -> str:
    """The JSON text of a property's value (NULL when it is missing): one parse of the body."""
    return f"JSON_EXTRACT({JSON_BODY}, {_path(prop)})"


# The helpers below read ``x``, a value's JSON text (a short document, cheap to parse again).


def _value(x: str) -> str:
    return f"JSON_VALUE({x}, '$')"


def _type(x: str) -> str:
    return f"JSON_TYPE({x})"


# Backslash, u: the start of a \u escape in JSON text (spelled without a backslash in SQL).
_ESCAPE = "CONCAT(CHAR(92), 'u')"


def _escaped(x: str) -> str:
    return f"LOCATE({_ESCAPE}, {x}) > 0"


def _plain_string(x: str) -> str:
    # A string written without \u escapes: JSON_VALUE gives its characters as Python reads
    # them (a \u escape may be half a surrogate pair, which Python keeps and UTF-8 cannot).
    return f"{_type(x)} = 'STRING' AND NOT {_escaped(x)}"


def _safe_int(x: str) -> str:
    # Digits only (MariaDB's JSON_TYPE says INTEGER for 1E5 too, which CAST reads as 1), short
    # enough not to overflow the casts below.
    value = _value(x)
    return (
        f"{_type(x)} = 'INTEGER' AND LENGTH({value}) <= 17 "
        f"AND {value} REGEXP '^-?[0-9]+$' "
        f"AND ABS(CAST({value} AS DECIMAL(20, 0))) <= {SAFE_INT}"
    )


def _bytes8(number: str) -> str:
    """An unsigned 64-bit integer as 8 big-endian bytes."""
    return f"UNHEX(LPAD(HEX({number}), 16, '0'))"


def _int_key(x: str) -> str:
    """:func:`~schemaless_store.values.index_values._int_key` of an int within ``SAFE_INT``:
    the tag, the double's bits made sortable, the int plus 2**63. The double of such an int is
    exact: exponent ``e`` (its bit length less one) and the bits below the leading one."""
    n = f"CAST({_value(x)} AS SIGNED)"
    a = f"ABS({n})"
    e = f"(LENGTH(BIN({a})) - 1)"
    bits = f"((({e} + 1023) << 52) | (({a} << (52 - {e})) & 4503599627370495))"
    sortable = (
        f"CASE WHEN {n} > 0 THEN {bits} | 9223372036854775808 "
        f"WHEN {n} = 0 THEN 9223372036854775808 ELSE 9223372036854775807 - {bits} END"
    )
    exact = f"({n} ^ 9223372036854775808)"
    return f"CONCAT(x'30', {_bytes8(sortable)}, {_bytes8(exact)})"


def column_sql(x: str, column: ColumnType) -> str:
    """The column value of the property whose JSON text is ``x``, or NULL where the server
    cannot give exactly what ``column.to_db`` gives (or the property is missing)."""
    kind = type(column)
    text = f"CONVERT({_value(x)} USING binary)"
    if kind is StrColumn:
        return (
            f"CASE WHEN {_plain_string(x)} AND LENGTH({text}) <= {int(column.max_bytes)} "
            f"THEN {text} END"
        )
    if kind is IntColumn:
        return f"CASE WHEN {_safe_int(x)} THEN CAST({_value(x)} AS SIGNED) END"
    if kind is FloatColumn:
        value = _value(x)
        return (
            f"CASE WHEN {_safe_int(x)} THEN CAST(CAST({value} AS SIGNED) AS DOUBLE) "
            f"WHEN {_type(x)} = 'DOUBLE' AND LENGTH({value}) <= 32 "
            f"AND {value} NOT REGEXP '[eE][-+]?[0-9]{{3}}' THEN CAST({value} AS DOUBLE) + 0e0 END"
        )
    if kind is KeyColumn:
        limit = int(column.max_bytes)
        cases = [
            f"WHEN {_plain_string(x)} AND 1 + LENGTH({text}) <= {limit} THEN CONCAT(x'50', {text})"
        ]
        if limit >= 1:
            cases += [
                f"WHEN {_type(x)} = 'NULL' THEN x'10'",
                f"WHEN {_type(x)} = 'BOOLEAN' THEN IF({x} = 'true', x'21', x'20')",
            ]
        if limit >= _INT_KEY_BYTES:
            cases.append(f"WHEN {_safe_int(x)} THEN {_int_key(x)}")
        return f"CASE {' '.join(cases)} END"
    raise ValueError(f"the server cannot compute a {column!r} column")


class Extraction:
    """The expressions of one index. A statement reads the entities in a derived table that
    parses each body as few times as it can: its state (:attr:`body`: UTF-8, valid JSON, an
    object, no name twice, the kind) and each indexed property's JSON text (``x0``, ``x1``...,
    one ``JSON_EXTRACT`` each); the derived table has a ``LIMIT``, so it is materialized, and
    the columns are computed from those short texts (:attr:`columns`). :meth:`state` says what
    they mean."""

    def __init__(self, index: Index) -> None:
        if not supported(index):
            raise ValueError(f"the server cannot compute the columns of {index!r}")
        self.index = index
        names = [f"x{n}" for n in range(len(index.properties))]
        self.extracts = ", ".join(
            f"{_extract(p)} AS {name}" for p, name in zip(index.properties, names, strict=True)
        )
        self.columns = [
            column_sql(f"d.{name}", index.columns[p])
            for p, name in zip(index.properties, names, strict=True)
        ]
        self.present = [f"d.{name} IS NOT NULL" for name in names]
        body_ok = (
            # Valid UTF-8 as Python reads it (CONVERT would put "?" for a bad sequence) ...
            f"CONVERT({JSON_BODY} USING binary) = SUBSTRING(body, 2) "
            # ... an object (the encoder writes no space before it; a body with one is left
            # to Python) ...
            f"AND LEFT({JSON_BODY}, 1) = '{{' "
            # ... valid JSON within MariaDB's 32 levels (else JSON_LENGTH is NULL), without a
            # name twice (JSON_EXTRACT finds the first, Python keeps the last; JSON_LENGTH
            # counts both, JSON_KEYS names each once): two parses of the body for all three.
            f"AND JSON_LENGTH({JSON_BODY}) = JSON_LENGTH(JSON_KEYS({JSON_BODY}))"
        )
        self.kind_params: list[Any] = []
        kind = ""
        if index.kind is not None:
            x = _extract(KIND_PROPERTY)
            # Another kind (or none, or not a string): no row; an escaped string: Python's.
            kind = (
                f"WHEN {_type(x)} = 'STRING' AND {_escaped(x)} THEN 2 "
                # COALESCE: no kind at all makes the test NULL, and NOT NULL is no match.
                f"WHEN NOT COALESCE({_plain_string(x)} AND "
                f"CONVERT({_value(x)} USING binary) = CONVERT(%s USING binary), 0) "
                "THEN 0 "
            )
            self.kind_params = [index.kind]
        # 2: Python's; 0: no row; 1: the columns say (CASE stops at the first branch that
        # holds: JSON_VALID before any other JSON function).
        self.body = (
            f"CASE WHEN body IS NULL OR {JSON_BODY} IS NULL THEN 2 "
            f"WHEN NOT COALESCE({body_ok}, 0) THEN 2 {kind}ELSE 1 END"
        )

    def select(self, source: Source, where: str, order: str, limit: int) -> str:
        """``added_id, key, updated, body state, column values..., presences...`` of the rows
        of ``source`` that ``where`` (after ``WHERE``) picks, ``order`` first, at most
        ``limit``: the parameters are :attr:`kind_params`, then ``where``'s."""
        outer = ", ".join(["d.b", *self.columns, *self.present])
        return (
            f"SELECT d.added_id, d.k, d.u, {outer} FROM (SELECT added_id, "
            f"{source.id_column} AS k, {UPDATED_TEXT} AS u, ({self.body}) AS b, {self.extracts} "
            f"FROM {source.table} WHERE {where} ORDER BY {order} LIMIT {int(limit)}) AS d "
            f"ORDER BY {order.replace('updated', 'd.u').replace('added_id', 'd.added_id')}"
        )

    def state(self, selected: Sequence[Any]) -> tuple[bool, tuple[Any, ...] | None]:
        """``(left to Python, the row's column values or None)`` from a :meth:`select`'s
        values after the entity's own: Python's when the body is, or when a property is there
        and its column value is not (a value the server cannot compute exactly); else no row
        when the body says so or a property is missing."""
        count = len(self.columns)
        body, columns, present = selected[0], selected[1 : count + 1], selected[count + 1 :]
        if int(body) == 2:
            return True, None
        if any(column is None and there for column, there in zip(columns, present, strict=True)):
            return True, None
        if int(body) == 0 or not all(present):
            return False, None
        return False, tuple(
            bytes(c) if isinstance(c, bytearray | memoryview) else c for c in columns
        )


def _server_rows(extraction: Extraction, rows: Sequence[Sequence[Any]]) -> list[ServerRow]:
    found = []
    for added_id, key, updated, *selected in rows:
        python, values = extraction.state(selected)
        found.append(ServerRow(int(added_id), bytes(key), updated, python, values))
    return found


def read_batch(
    index: Index, extraction: Extraction, alias: str, last: int, upto: int, limit: int
) -> list[ServerRow]:
    """Entities with ``last < added_id <= upto`` by ``added_id`` (a backfill's batch), each with
    its Python flag and its row's column values: no body crosses the network. (A body that is
    not valid JSON makes the column functions warn and answer NULL: a read, the warnings do
    not matter, and its state says Python.)"""
    source = index.source
    extra, params = source.where()
    sql = extraction.select(source, f"added_id > %s AND added_id <= %s{extra}", "added_id", limit)
    rows = shards.read(alias, sql, [*extraction.kind_params, last, upto, *params])
    return _server_rows(extraction, rows)


def read_newest_first(
    index: Index,
    extraction: Extraction,
    alias: str,
    bound: tuple[Any, int] | None,
    limit: int,
) -> list[ServerRow]:
    """:func:`.entities.newest_first` (a repair's batch) with the rows the server reads."""
    source = index.source
    where, params = newest_first_after(source, alias, bound)
    sql = extraction.select(source, where, "updated DESC, added_id DESC", limit)
    rows = shards.read(alias, sql, [*extraction.kind_params, *params])
    return _server_rows(extraction, rows)


def current(
    index: Index, extraction: Extraction, alias: str, keys: Sequence[bytes]
) -> list[ServerRow]:
    """The entities among ``keys`` that exist on ``alias``, with the rows the server reads (a
    sweep's look at the entities its index rows point at)."""
    source = index.source
    extra, params = source.where()
    found: list[ServerRow] = []
    for chunk in chunks(keys, 500):
        marks = ", ".join(["%s"] * len(chunk))
        where = f"{source.id_column} IN ({marks}){extra}"
        sql = extraction.select(source, where, "added_id", len(chunk))
        rows = shards.read(alias, sql, [*extraction.kind_params, *chunk, *params])
        found += _server_rows(extraction, rows)
    return found


def bodies(source: Source, alias: str, added_ids: Sequence[int]) -> list[tuple[Any, ...]]:
    """``(added_id, key, updated, body)`` of these rows (the ones the server leaves to
    Python), by ``added_id``."""
    extra, params = source.where()
    found: list[tuple[Any, ...]] = []
    for chunk in chunks(sorted(added_ids), 500):
        marks = ", ".join(["%s"] * len(chunk))
        found += [
            (added_id, bytes(key), updated, None if body is None else bytes(body))
            for added_id, key, updated, body in shards.read(
                alias,
                f"SELECT added_id, {source.id_column}, {UPDATED_TEXT}, body FROM {source.table} "
                f"WHERE added_id IN ({marks}){extra} ORDER BY added_id",
                [*chunk, *params],
            )
        ]
    return found


def insert_select(
    index: Index,
    extraction: Extraction,
    alias: str,
    added_ids: Sequence[int],
    refused_by: Refusal,
) -> int | None:
    """Write the rows the server computes for the entities ``added_ids`` on ``alias`` (read
    by :func:`read_batch` as having one) into the index table there: one idempotent
    ``INSERT ... SELECT`` that walks the entities by ``added_id`` (a range of the primary key,
    filtered to these ids), read as a consistent read of its own (``READ COMMITTED``: no row
    of ``entities`` is locked, no writer waits). A row whose column values the server no
    longer computes (its entity changed since) is not written (``HAVING``); one that changed
    otherwise is the caller's to check.

    Every row must belong on ``alias``: its index writer must serve every bucket, which
    ``refused_by`` (the fence) is asked first, on that connection; None, with nothing written,
    when it does not. Else the rows written (a row already there counts)."""
    if not added_ids:
        return 0
    source = index.source
    extra, params = source.where()
    conn = shards.index_connection(alias)
    quote = conn.ops.quote_name
    names = ", ".join(quote(c) for c in (*index.properties, "entity_id"))
    entity = quote("entity_id")
    wanted = sorted(added_ids)
    marks = ", ".join(["%s"] * len(wanted))
    selected = ", ".join(f"{sql} AS c{n}" for n, sql in enumerate(extraction.columns))
    computed = " AND ".join(f"c{n} IS NOT NULL" for n in range(len(extraction.columns)))
    sql = (
        f"INSERT INTO {quote(index.name)} ({names}) SELECT {selected}, d.k FROM "
        f"(SELECT {source.id_column} AS k, {extraction.extracts} FROM {source.table} "
        f"WHERE added_id >= %s AND added_id <= %s AND added_id IN ({marks}){extra} "
        f"LIMIT {len(wanted)}) AS d "
        f"HAVING {computed} ON DUPLICATE KEY UPDATE {entity} = {entity}"
    )
    with shards.errors_named(alias):
        if refused_by(conn, list(range(bucket_map.current().buckets))):
            return None
    with shards.errors_named(alias), shards.statement_cursor(conn) as cursor:
        # The next transaction only (this statement, in autocommit): InnoDB reads the
        # SELECT's rows without shared locks at READ COMMITTED.
        cursor.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        cursor.execute(sql, [wanted[0], wanted[-1], *wanted, *params])
        return max(int(cursor.rowcount), 0)
