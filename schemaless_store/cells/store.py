"""The versioned cell store: immutable cells in an append-only ``cell`` table per shard.

A cell is one version of one column of one row::

    cell(added_at BIGINT AUTO_INCREMENT PRIMARY KEY,   -- append order on this shard (the feed)
         row_key BINARY(16), column_name VARCHAR(64), ref_key BIGINT,
         body MEDIUMBLOB NULL, created_at DATETIME(6),
         UNIQUE cell_idx (row_key, column_name, ref_key))

A row's cells live on the shard that owns ``row_key`` (the same buckets as entity ids), so an
entity and its history share a server and a transaction. Writing never changes a stored cell:
:func:`put` appends the next version (``ref_key`` = the column's highest + 1, taken under the
lock of its ``cell_head`` row so two writers never get the same one) or stores the version it
is given, and storing an existing version again is fine only with the same body (a retry);
another body raises :class:`CellImmutable`. A put runs the write protocol
(:mod:`..writes.protocol`) over ``cell_head``, so indexes over cell columns are kept like
entity indexes.

Column names starting with ``_`` are the store's own: ``_entity`` holds entity history
(``SCHEMALESS["HISTORY"]``). Functions that return cells take the model class to build
(``Cell``, from its manager).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from ..config import conf
from ..config.indexes import cell_source
from ..exceptions import CellImmutable, ConfigurationError, InvalidCell
from ..sql.values import datetime_converter, db_datetime
from ..tables import buckets as bucket_table
from ..tables import cells as cell_table
from ..tables.cells import ENTITY_COLUMN
from ..topology import bucket_map, shards
from ..values import bounds, entity_ids
from ..values.codec import decode_body
from ..writes.protocol import Change, SplitWrite, Write, run
from ..writes.rows import encode_body, rows_of

MAX_COLUMN_NAME = 64
MAX_REF_KEY = 2**63 - 1


def put(
    model: Any,
    row_key: Any,
    column_name: str,
    body: Mapping[str, Any] | None,
    ref_key: int | None = None,
    created: dt.datetime | None = None,
) -> Any:
    """Append a version of ``(row_key, column_name)`` and return the stored cell.

    ``created`` (an aware datetime) is the version's ``created_at``, by default now: a
    restore gives the time the version was first made."""
    key = entity_ids.entity_id_bytes(row_key)
    check_column(column_name)
    if ref_key is not None:
        _check_ref_key(ref_key)
    encoded = encode(body)
    # The index rows of the new version: computed (and validated) before anything is written.
    rows = set() if body is None else rows_of(dict(body), column=column_name)
    alias = bucket_map.alias_for(key)
    if created is None:
        created = timezone.now()
    elif created.utcoffset() is None:
        raise InvalidCell(f"created must be an aware datetime, not {created!r}")

    def store(write: Write) -> dict[str, Any]:
        """Step 2: the head row (when this version is the latest) and the cell; its result
        (kept by the receipt): the version and ``added_at`` stored, or none if it existed."""
        change = write.changes[0]
        change.rows = rows  # (a retry starts again from the new version's rows)
        head = None if change.found is None else change.found.version
        version = ref_key if ref_key is not None else (head or 0) + 1
        conn = write.conn  # the owner's (a move may have sent the write elsewhere)
        stamp = db_datetime(conn, created)
        with shards.statement_cursor(conn) as cursor:
            if head is not None and version <= head:
                change.rows = change.old  # not the latest: what the head implies is unchanged
                if cell_table.version_exists(cursor, key, column_name, version):
                    return {}  # stored already: compared with the given body below
            elif head is None:
                cell_table.insert_head(cursor, key, column_name, version, stamp, encoded)
            else:
                cell_table.update_head(cursor, key, column_name, version, stamp, encoded)
            added_at = cell_table.append(cursor, key, column_name, version, encoded, stamp)
        return {"version": version, "added_at": added_at}

    write = Write(alias, [Change(key, rows)], cell_source(column_name))
    run(write, store)
    alias, stored = write.alias, write.result
    if not stored:
        existing = get(model, key, column_name, ref_key)
        if not _same_body(existing.body_bytes, encoded):
            raise CellImmutable(
                f"cell {existing} already exists with another body; cells are "
                "immutable: write the next version with ref_key=None"
            )
        return existing
    return _cell(
        model, alias, stored["added_at"], key, column_name, stored["version"], encoded, created
    )


def get(model: Any, row_key: Any, column_name: str, ref_key: int | None = None) -> Any:
    """The latest version of a column, or version ``ref_key``; ``model.DoesNotExist`` if none."""
    key = entity_ids.entity_id_bytes(row_key)
    _check_column(column_name, user=False)
    if ref_key is not None:
        _check_ref_key(ref_key)

    def read(alias: str) -> tuple[str, Any]:
        if ref_key is None:
            return alias, cell_table.latest(alias, key, column_name)
        return alias, cell_table.version(alias, key, column_name, ref_key)

    alias, found = bucket_table.read_owned(key, read)
    if found is None:
        version = "no version" if ref_key is None else f"no version {ref_key}"
        raise model.DoesNotExist(
            f"{version} of column {column_name!r} of row {uuid.UUID(bytes=key)}"
        )
    return from_row(model, alias, found)


def versions(model: Any, row_key: Any, column_name: str) -> list[Any]:
    """Every version of a column, oldest (lowest ``ref_key``) first."""
    key = entity_ids.entity_id_bytes(row_key)
    _check_column(column_name, user=False)
    alias, rows = bucket_table.read_owned(
        key, lambda alias: (alias, cell_table.versions(alias, key, column_name))
    )
    return [from_row(model, alias, row) for row in rows]


def row(model: Any, row_key: Any) -> dict[str, Any]:
    """The latest version of every column of a row, by column name (sorted by name)."""
    key = entity_ids.entity_id_bytes(row_key)
    alias, rows = bucket_table.read_owned(key, lambda alias: (alias, cell_table.row(alias, key)))
    cells = (from_row(model, alias, found) for found in rows)
    return {cell.column_name: cell for cell in cells}


class CellFetcher:
    """What a query over a cell column's indexes turns ids into: the latest version of that
    column of each row key (:class:`~schemaless_store.query.IndexQuery`'s fetcher)."""

    join_entities = False

    def __init__(self, model: Any, column: str) -> None:
        self.model = model
        self.column = column

    def fetch(self, row_keys: Iterable[bytes]) -> dict[bytes, Any]:
        wanted = list(row_keys)
        return bucket_table.retrying_stale(lambda: self._fetch(wanted))

    def _fetch(self, row_keys: list[bytes]) -> dict[bytes, Any]:
        used = bucket_map.current()
        found: dict[bytes, Any] = {}
        for alias, rows in cell_table.latest_by_keys(row_keys, self.column).items():
            for found_row in rows:
                cell = from_row(self.model, alias, found_row)
                found[bytes(cell.row_key_bytes)] = cell
        for alias in {used.owners[bucket_map.bucket_for(key)] for key in row_keys}:
            bucket_table.confirm_read(alias, used)
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
    key = entity_ids.entity_id_bytes(entity_id)
    alias, rows = bucket_table.read_owned(
        key, lambda alias: (alias, cell_table.versions(alias, key, ENTITY_COLUMN))
    )
    convert = datetime_converter(shards.connection(alias))
    found = []
    for _added_at, _key, _column, ref_key, body, created in rows:
        properties = (
            None if body is None else {"id": uuid.UUID(bytes=key), **decode_body(bytes(body))}
        )
        found.append(EntityVersion(ref_key, convert(created), properties))
    return found


def restore_history(versions: Iterable[tuple[bytes, int, bytes | None, dt.datetime]]) -> int:
    """Store entity versions ``(entity id, ref_key, body or None, created_at)`` as they were
    (a restore of ``SCHEMALESS["HISTORY"]``), each unless that version is stored already; one
    transaction per shard. Returns how many were given. History versions imply no index rows:
    the protocol run only gives them its transaction, retries and write lock."""
    by_alias: dict[str, list[tuple[bytes, int, bytes | None, dt.datetime]]] = {}
    given = 0
    for key, ref_key, body, created in versions:
        _check_ref_key(ref_key)
        by_alias.setdefault(bucket_map.alias_for(key), []).append((key, ref_key, body, created))
        given += 1
    for alias, group in by_alias.items():

        def store(write: Write, group: list[Any] = group) -> dict[str, Any]:
            conn = write.conn  # the owner's (a move may have sent the write elsewhere)
            rows = [
                (key, ENTITY_COLUMN, ref_key, body, db_datetime(conn, created))
                for key, ref_key, body, created in group
            ]
            with shards.statement_cursor(conn) as cursor:
                cell_table.insert_versions(cursor, conn.vendor, rows)
            return {}

        # The keys' changes imply no index rows: they give the write its fence (step 0).
        keys_of = dict.fromkeys(key for key, *_rest in group)
        changes = [Change(key, set(), fresh=True) for key in keys_of]
        try:
            run(Write(alias, changes, cell_source(ENTITY_COLUMN)), store)
        except SplitWrite:
            restore_history(group)  # its buckets moved to several shards: regrouped
    return given


# --- rows and values ------------------------------------------------------------------------


def encode(body: Mapping[str, Any] | None) -> bytes | None:
    if body is None:
        return None
    if not isinstance(body, Mapping):
        raise InvalidCell(f"a cell body is a dict of properties or None, not {type(body).__name__}")
    return encode_body(dict(body))


def from_row(model: Any, alias: str, found: tuple[Any, ...]) -> Any:
    """A cell from ``SELECT CELL_COLUMNS`` on ``alias``."""
    added_at, key, column_name, ref_key, body, created = found
    convert = datetime_converter(shards.connection(alias))
    return _cell(
        model,
        alias,
        added_at,
        bytes(key),
        column_name,
        ref_key,
        None if body is None else bytes(body),
        convert(created),
    )


def _cell(
    model: Any,
    alias: str,
    added_at: int,
    key: bytes,
    column_name: str,
    ref_key: int,
    body: bytes | None,
    created: dt.datetime,
) -> Any:
    cell = model(
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
    if not bounds.whole(ref_key, 1, MAX_REF_KEY):
        raise InvalidCell(f"ref_key is an int from 1 to 2**63 - 1, not {ref_key!r}")


def check_column(column_name: Any) -> None:
    """Raise :class:`InvalidCell` unless ``column_name`` names a user cell column."""
    _check_column(column_name, user=True)
