"""The versioned cell store: immutable cells in an append-only ``cell`` table per shard.

A cell is one version of one column of one row::

    cell(added_at BIGINT AUTO_INCREMENT PRIMARY KEY,   -- append order on this shard (the feed)
         row_key BINARY(16), column_name VARCHAR(64), ref_key BIGINT,
         body MEDIUMBLOB NULL, created_at DATETIME(6),
         UNIQUE cell_idx (row_key, column_name, ref_key))

A row's cells live on the shard that owns ``row_key`` (the same buckets as entity ids), so an
entity and its history share a server and a transaction. Writing never changes a stored cell:
:func:`put` appends the next version (``ref_key`` = the column's highest + 1, taken under a lock
so two writers never get the same one) or stores the version it is given, and storing an existing
version again is fine only with the same body (a retry); another body raises
:class:`CellImmutable`.

Column names starting with ``_`` are the store's own: ``_entity`` holds entity history
(``SCHEMALESS["HISTORY"]``).
"""

from __future__ import annotations

import datetime as dt
import random
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, OperationalError, transaction
from django.utils import timezone

from . import conf, keys, shards, writes
from .exceptions import (
    BodyTooLarge,
    CellImmutable,
    ConfigurationError,
    InvalidCell,
    InvalidEntityError,
)
from .indexes import cell_source

if TYPE_CHECKING:
    from .models import Cell

ENTITY_COLUMN = "_entity"
MAX_COLUMN_NAME = 64
MAX_REF_KEY = 2**63 - 1
CELL_COLUMNS = "added_at, row_key, column_name, ref_key, body, created_at"

# Attempts when concurrent first writers of a column collide on its new head row (a duplicate
# key, or a deadlock).
_HEAD_ATTEMPTS = 20


def put(
    row_key: Any,
    column_name: str,
    body: Mapping[str, Any] | None,
    ref_key: int | None = None,
) -> Cell:
    """Append a version of ``(row_key, column_name)`` and return the stored cell."""
    key = keys.entity_id_bytes(row_key)
    _check_column(column_name, user=True)
    if ref_key is not None:
        _check_ref_key(ref_key)
    encoded = encode(body)
    # Index rows the new version implies: computed (and validated) before anything is written.
    rows = set() if body is None else writes.rows_of(dict(body), column=column_name)
    source = cell_source(column_name)
    alias = shards.alias_for(key)
    conn = shards.connection(alias)
    created = timezone.now()
    added: set[Any] = set()
    stale: set[Any] = set()

    stamp = conn.ops.adapt_datetimefield_value(created)

    def lock_head(cursor: Any) -> tuple[int, bytes | None] | None:
        # Concurrent writers of one column queue on its head row; the first version of a
        # column has no head row yet: two first writers may both insert one, and the second
        # gets a duplicate key (or a deadlock) and tries again, then finds it.
        cursor.execute(
            "SELECT ref_key, body FROM cell_head WHERE row_key = %s AND column_name = %s"
            + _for_update(conn),
            (key, column_name),
        )
        found = cursor.fetchone()
        if found is None:
            return None
        return int(found[0]), None if found[1] is None else bytes(found[1])

    def move_head(cursor: Any, head: int | None, version: int) -> None:
        if head is None:
            cursor.execute(
                "INSERT INTO cell_head (row_key, column_name, ref_key, updated, body) "
                "VALUES (%s, %s, %s, %s, %s)",
                (key, column_name, version, stamp, encoded),
            )
        elif version > head:
            cursor.execute(
                "UPDATE cell_head SET ref_key = %s, updated = %s, body = %s "
                "WHERE row_key = %s AND column_name = %s",
                (version, stamp, encoded, key, column_name),
            )

    def append(cursor: Any, version: int) -> int:
        cursor.execute(
            "INSERT INTO cell (row_key, column_name, ref_key, body, created_at) "
            "VALUES (%s, %s, %s, %s, %s)",
            (key, column_name, version, encoded, stamp),
        )
        return int(cursor.lastrowid)

    def attempt() -> tuple[int, int] | None:
        with transaction.atomic(using=alias), shards.statement_cursor(conn) as cursor:
            locked = lock_head(cursor)
            head, head_body = (None, None) if locked is None else locked
            version = ref_key if ref_key is not None else (head or 0) + 1
            if (
                ref_key is not None
                and head is not None
                and ref_key <= head
                and _version_exists(cursor, key, column_name, ref_key)
            ):
                return None  # stored already: compare bodies below
            move_head(cursor, head, version)
            stale.clear()
            if (rows or head_body is not None) and (head is None or version > head):
                # DESIGN section 3: the new version's rows are committed before it is;
                # the rows only the old head implied go once it has committed.
                old = writes.stored_rows(key, head_body, source)
                new_rows = rows - old
                added.update(new_rows)
                writes.add_index_rows(writes._with_entity(new_rows, key))
                stale.update(old - rows)
            return version, append(cursor, version)

    caller_atomic = conn.in_atomic_block
    with shards.write_lock(), shards.errors_named(alias):
        for attempt_number in range(_HEAD_ATTEMPTS):
            try:
                stored = attempt()
                break
            except (IntegrityError, OperationalError) as exc:
                # A deadlock rolls back a caller's whole transaction: theirs to retry.
                again = isinstance(exc, IntegrityError) or (
                    shards.is_retryable(exc) and not caller_atomic
                )
                if not again or attempt_number == _HEAD_ATTEMPTS - 1:
                    writes._undo_added(alias, {key: added}, source)
                    raise
                time.sleep(random.uniform(0, 0.002 * (attempt_number + 1)))
        if stored is None:
            existing = get(key, column_name, ref_key)
            if not _same_body(existing.body_bytes, encoded):
                raise CellImmutable(
                    f"cell {existing} already exists with another body; cells are "
                    "immutable: write the next version with ref_key=None"
                )
            return existing
        version, added_at = stored
    if stale:
        writes._remove_stale_later(alias, {key: stale}, source)
    return _cell(alias, added_at, key, column_name, version, encoded, created)


def get(row_key: Any, column_name: str, ref_key: int | None = None) -> Cell:
    """The latest version of a column, or version ``ref_key``; ``Cell.DoesNotExist`` if none."""
    from .models import Cell

    key = keys.entity_id_bytes(row_key)
    _check_column(column_name, user=False)
    alias = shards.alias_for(key)
    if ref_key is None:
        rows = shards.read(
            alias,
            f"SELECT {CELL_COLUMNS} FROM cell WHERE row_key = %s AND column_name = %s "
            "ORDER BY ref_key DESC LIMIT 1",
            (key, column_name),
        )
    else:
        _check_ref_key(ref_key)
        rows = shards.read(
            alias,
            f"SELECT {CELL_COLUMNS} FROM cell "
            "WHERE row_key = %s AND column_name = %s AND ref_key = %s",
            (key, column_name, ref_key),
        )
    if not rows:
        version = "no version" if ref_key is None else f"no version {ref_key}"
        raise Cell.DoesNotExist(f"{version} of column {column_name!r} of row {_uuid(key)}")
    return from_row(alias, rows[0])


def versions(row_key: Any, column_name: str) -> list[Cell]:
    """Every version of a column, oldest (lowest ``ref_key``) first."""
    key = keys.entity_id_bytes(row_key)
    _check_column(column_name, user=False)
    alias = shards.alias_for(key)
    rows = shards.read(
        alias,
        f"SELECT {CELL_COLUMNS} FROM cell WHERE row_key = %s AND column_name = %s ORDER BY ref_key",
        (key, column_name),
    )
    return [from_row(alias, row) for row in rows]


def row(row_key: Any) -> dict[str, Cell]:
    """The latest version of every column of a row, by column name (sorted by name)."""
    key = keys.entity_id_bytes(row_key)
    alias = shards.alias_for(key)
    rows = shards.read(
        alias,
        f"SELECT {CELL_COLUMNS} FROM cell c WHERE c.row_key = %s AND c.ref_key = "
        "(SELECT MAX(ref_key) FROM cell l WHERE l.row_key = c.row_key "
        "AND l.column_name = c.column_name) ORDER BY c.column_name",
        (key,),
    )
    return {cell.column_name: cell for cell in (from_row(alias, r) for r in rows)}


def latest_by_keys(keys_: Iterable[bytes], column_name: str) -> dict[bytes, Cell]:
    """The latest version of ``column_name`` of each row key that has one (the read path of
    queries over cell indexes: one query per shard, like entities)."""
    by_alias: dict[str, list[bytes]] = {}
    for key in keys_:
        by_alias.setdefault(shards.alias_for(key), []).append(key)
    columns = ", ".join(f"c.{name.strip()}" for name in CELL_COLUMNS.split(","))
    found: dict[bytes, Cell] = {}
    for alias, alias_keys in by_alias.items():
        for start in range(0, len(alias_keys), 500):
            chunk = alias_keys[start : start + 500]
            marks = ", ".join(["%s"] * len(chunk))
            rows = shards.read(
                alias,
                f"SELECT {columns} FROM cell_head h JOIN cell c ON c.row_key = h.row_key "
                "AND c.column_name = h.column_name AND c.ref_key = h.ref_key "
                f"WHERE h.row_key IN ({marks}) AND h.column_name = %s",
                [*chunk, column_name],
            )
            for row in rows:
                cell = from_row(alias, row)
                found[bytes(cell.row_key_bytes)] = cell
    return found


# --- entity history -------------------------------------------------------------------------


@dataclass(frozen=True)
class EntityVersion:
    """One stored version of an entity: its properties then (``None``: it was deleted)."""

    ref_key: int
    created_at: dt.datetime
    properties: dict[str, Any] | None

    @property
    def deleted(self) -> bool:
        return self.properties is None


def entity_history(entity_id: Any) -> list[EntityVersion]:
    """Every version of an entity the store kept, oldest first (``SCHEMALESS["HISTORY"]``)."""
    if not conf.get().history:
        raise ConfigurationError(
            "entity history is off: set SCHEMALESS['HISTORY'] = True to keep every version"
        )
    key = keys.entity_id_bytes(entity_id)
    found = []
    for cell in versions(key, ENTITY_COLUMN):
        body = cell.body
        properties = None if body is None else {"id": uuid.UUID(bytes=key), **body}
        found.append(EntityVersion(cell.ref_key, cell.created_at, properties))
    return found


# The write path calls this inside the entity's transaction.


def append_entity_versions(
    alias: str, versions: Iterable[tuple[bytes, bytes | None]], created: dt.datetime
) -> None:
    """Append one ``_entity`` cell per ``(entity id, body or None for a deletion)``.

    The caller holds each entity's row lock (or its fresh ``INSERT``) in the open transaction on
    ``alias``, so nothing else appends to these entities' histories until it commits.
    """
    items = list(versions)
    if not items:
        return
    conn = shards.connection(alias)
    ids = [entity_id for entity_id, _body in items]
    marks = ", ".join(["%s"] * len(ids))
    latest = dict(
        shards.read(
            alias,
            f"SELECT row_key, MAX(ref_key) FROM cell WHERE column_name = %s "
            f"AND row_key IN ({marks}) GROUP BY row_key",
            [ENTITY_COLUMN, *ids],
        )
    )
    latest = {bytes(k): v for k, v in latest.items()}
    stamp = conn.ops.adapt_datetimefield_value(created)
    values = []
    for entity_id, body in items:
        version = latest.get(entity_id, 0) + 1
        latest[entity_id] = version
        values.append((entity_id, ENTITY_COLUMN, version, body, stamp))
    with shards.statement_cursor(conn) as cursor:
        cursor.executemany(
            "INSERT INTO cell (row_key, column_name, ref_key, body, created_at) "
            "VALUES (%s, %s, %s, %s, %s)",
            values,
        )


# --- rows and values ------------------------------------------------------------------------


def encode(body: Mapping[str, Any] | None) -> bytes | None:
    if body is None:
        return None
    if not isinstance(body, Mapping):
        raise InvalidCell(f"a cell body is a dict of properties or None, not {type(body).__name__}")
    properties = dict(body)
    for name in properties:
        if not isinstance(name, str):
            raise InvalidEntityError(f"property names are strings, not {type(name).__name__}")
    settings = conf.get()
    encoded = settings.codec.encode(properties)
    if len(encoded) > settings.max_body_bytes:
        raise BodyTooLarge(
            f"cell body is {len(encoded)} bytes once encoded; the limit "
            f"(SCHEMALESS['MAX_BODY_BYTES']) is {settings.max_body_bytes}"
        )
    return encoded


def from_row(alias: str, row: tuple[Any, ...]) -> Cell:
    """A :class:`Cell` from ``SELECT CELL_COLUMNS`` on ``alias``."""
    from .query import _datetime_converter

    added_at, key, column_name, ref_key, body, created = row
    convert = _datetime_converter(shards.connection(alias))
    return _cell(
        alias,
        added_at,
        bytes(key),
        column_name,
        ref_key,
        None if body is None else bytes(body),
        convert(created),
    )


def _cell(
    alias: str,
    added_at: int,
    key: bytes,
    column_name: str,
    ref_key: int,
    body: bytes | None,
    created: dt.datetime,
) -> Cell:
    from .models import Cell

    cell = Cell(
        added_at=added_at,
        row_key_bytes=key,
        column_name=column_name,
        ref_key=ref_key,
        body_bytes=body,
        created_at=created,
    )
    cell._state.adding = False
    cell._state.db = alias
    return cell


def _version_exists(cursor: Any, key: bytes, column_name: str, ref_key: int) -> bool:
    cursor.execute(
        "SELECT 1 FROM cell WHERE row_key = %s AND column_name = %s AND ref_key = %s",
        (key, column_name, ref_key),
    )
    return cursor.fetchone() is not None


def _same_body(stored: bytes | None, given: bytes | None) -> bool:
    if stored is None or given is None:
        return stored is given
    if bytes(stored) == given:
        return True
    codec = conf.get().codec
    return codec.decode(bytes(stored)) == codec.decode(given)


def _check_column(column_name: Any, *, user: bool) -> None:
    if not isinstance(column_name, str) or not column_name:
        raise InvalidCell(f"a column name is a non-empty string, not {column_name!r}")
    if len(column_name) > MAX_COLUMN_NAME:
        raise InvalidCell(
            f"column name {column_name[:20]!r}... is {len(column_name)} characters; "
            f"the limit is {MAX_COLUMN_NAME}"
        )
    if user and column_name.startswith("_"):
        raise InvalidCell(
            f"column name {column_name!r}: names starting with '_' are the store's own "
            f"({ENTITY_COLUMN!r} holds entity history)"
        )


def _check_ref_key(ref_key: Any) -> None:
    if isinstance(ref_key, bool) or not isinstance(ref_key, int) or not 1 <= ref_key <= MAX_REF_KEY:
        raise InvalidCell(f"ref_key is an int from 1 to 2**63 - 1, not {ref_key!r}")


def _for_update(conn: Any) -> str:
    return " FOR UPDATE" if conn.vendor == "mysql" else ""


def _uuid(key: bytes) -> str:
    return str(uuid.UUID(bytes=key))


def check_column(column_name: Any) -> None:
    """Raise :class:`InvalidCell` unless ``column_name`` names a user cell column."""
    _check_column(column_name, user=True)
