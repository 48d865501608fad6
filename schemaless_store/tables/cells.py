"""The ``cell`` table (append-only versions: a row's cells live on the shard of its key) and
``cell_head`` (the latest version of each user column, locked to number the next one)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from ..sql import dialects
from ..sql.values import as_param
from ..topology import bucket_map, shards
from .entities import chunks

CELL_COLUMNS = "added_at, row_key, column_name, ref_key, body, created_at"
# The store's own column of entity versions (SCHEMALESS["HISTORY"]).
ENTITY_COLUMN = "_entity"
_JOINED = ", ".join(f"c.{name.strip()}" for name in CELL_COLUMNS.split(","))


# --- writing a version (in the open transaction, on the caller's cursor) -----------------------


def insert_head(
    cursor: Any, key: bytes, column: str, version: int, stamp: Any, body: bytes | None
) -> None:
    cursor.execute(
        "INSERT INTO cell_head (row_key, column_name, ref_key, updated, body) "
        "VALUES (%s, %s, %s, %s, %s)",
        (key, column, version, stamp, body),
    )


def update_head(
    cursor: Any, key: bytes, column: str, version: int, stamp: Any, body: bytes | None
) -> None:
    cursor.execute(
        "UPDATE cell_head SET ref_key = %s, updated = %s, body = %s "
        "WHERE row_key = %s AND column_name = %s",
        (version, stamp, body, key, column),
    )


def append(
    cursor: Any, key: bytes, column: str, version: int, body: bytes | None, stamp: Any
) -> int:
    """Insert one cell; its ``added_at`` (its position in the shard's change feed)."""
    cursor.execute(
        "INSERT INTO cell (row_key, column_name, ref_key, body, created_at) "
        "VALUES (%s, %s, %s, %s, %s)",
        (key, column, version, body, stamp),
    )
    return int(cursor.lastrowid)


def version_exists(cursor: Any, key: bytes, column: str, ref_key: int) -> bool:
    cursor.execute(
        "SELECT 1 FROM cell WHERE row_key = %s AND column_name = %s AND ref_key = %s",
        (key, column, ref_key),
    )
    return cursor.fetchone() is not None


def append_entity_versions(
    cursor: Any, versions: Sequence[tuple[bytes, bytes | None]], stamp: Any
) -> None:
    """Append one ``_entity`` cell per ``(entity id, body or None for a deletion)``, numbered
    after each entity's latest. The caller's transaction holds each entity's row lock (or its
    fresh ``INSERT``), so nothing else appends to these histories until it commits."""
    ids = [entity_id for entity_id, _body in versions]
    latest: dict[bytes, int] = {}
    for chunk in chunks(ids, 500):
        cursor.execute(
            "SELECT row_key, MAX(ref_key) FROM cell WHERE column_name = %s "
            f"AND row_key IN ({', '.join(['%s'] * len(chunk))}) GROUP BY row_key",
            [ENTITY_COLUMN, *chunk],
        )
        latest.update((bytes(key), int(top)) for key, top in cursor.fetchall())
    values = []
    for entity_id, body in versions:
        version = latest.get(entity_id, 0) + 1
        latest[entity_id] = version
        values.append((entity_id, ENTITY_COLUMN, version, body, stamp))
    cursor.executemany(
        "INSERT INTO cell (row_key, column_name, ref_key, body, created_at) "
        "VALUES (%s, %s, %s, %s, %s)",
        values,
    )


def entity_version_statements(
    versions: Sequence[tuple[bytes, bytes | None]], stamp: Any
) -> list[tuple[str, list[Any]]]:
    """:func:`append_entity_versions` as statements that need no answer in between (to send
    with the ``COMMIT``, one round trip): each version's number is read into a session
    variable by the same plain read, then inserted. One ``(entity id, body)`` per entity."""
    statements: list[tuple[str, list[Any]]] = []
    for entity_id, body in versions:
        statements.append((_NEXT_VERSION, [ENTITY_COLUMN, entity_id]))
        statements.append((_INSERT_VERSION, [entity_id, ENTITY_COLUMN, body, stamp]))
    return statements


def entity_version_from_row(entity_id: bytes, stamp: Any) -> list[tuple[str, list[Any]]]:
    """:func:`entity_version_statements` for a body the server built (a partial update
    applied there): the version copies the entity's row, and only when the statement before
    changed it (``@schemaless_added_id``, :data:`..tables.json_updates.KEEP_APPLIED`)."""
    return [
        (_NEXT_VERSION, [ENTITY_COLUMN, entity_id]),
        (
            "INSERT INTO cell (row_key, column_name, ref_key, body, created_at) "
            "SELECT id, %s, @schemaless_version, body, %s FROM entities "
            "WHERE id = %s AND @schemaless_added_id > 0",
            [ENTITY_COLUMN, stamp, entity_id],
        ),
    ]


_NEXT_VERSION = (
    "SELECT COALESCE(MAX(ref_key), 0) + 1 INTO @schemaless_version FROM cell "
    "WHERE column_name = %s AND row_key = %s"
)
_INSERT_VERSION = (
    "INSERT INTO cell (row_key, column_name, ref_key, body, created_at) "
    "VALUES (%s, %s, @schemaless_version, %s, %s)"
)


# --- reading -----------------------------------------------------------------------------------


def latest(alias: str, key: bytes, column: str) -> tuple[Any, ...] | None:
    rows = shards.read(
        alias,
        f"SELECT {CELL_COLUMNS} FROM cell WHERE row_key = %s AND column_name = %s "
        "ORDER BY ref_key DESC LIMIT 1",
        (key, column),
    )
    return rows[0] if rows else None


def version(alias: str, key: bytes, column: str, ref_key: int) -> tuple[Any, ...] | None:
    rows = shards.read(
        alias,
        f"SELECT {CELL_COLUMNS} FROM cell WHERE row_key = %s AND column_name = %s AND ref_key = %s",
        (key, column, ref_key),
    )
    return rows[0] if rows else None


def versions(alias: str, key: bytes, column: str) -> list[tuple[Any, ...]]:
    """Every version of a column, oldest (lowest ``ref_key``) first."""
    return shards.read(
        alias,
        f"SELECT {CELL_COLUMNS} FROM cell WHERE row_key = %s AND column_name = %s ORDER BY ref_key",
        (key, column),
    )


def row(alias: str, key: bytes) -> list[tuple[Any, ...]]:
    """The latest version of every column of a row, by column name."""
    return shards.read(
        alias,
        f"SELECT {CELL_COLUMNS} FROM cell c WHERE c.row_key = %s AND c.ref_key = "
        "(SELECT MAX(ref_key) FROM cell l WHERE l.row_key = c.row_key "
        "AND l.column_name = c.column_name) ORDER BY c.column_name",
        (key,),
    )


def latest_by_keys(keys: Iterable[bytes], column: str) -> dict[str, list[tuple[Any, ...]]]:
    """The latest version of ``column`` of each row key that has one, per shard (one query per
    shard and 500 keys, through ``cell_head``)."""
    by_alias: dict[str, list[bytes]] = defaultdict(list)
    for key in keys:
        by_alias[bucket_map.alias_for(key)].append(key)
    found: dict[str, list[tuple[Any, ...]]] = {}
    for alias, alias_keys in by_alias.items():
        rows = found.setdefault(alias, [])
        for chunk in chunks(alias_keys, 500):
            rows.extend(
                shards.read(
                    alias,
                    f"SELECT {_JOINED} FROM cell_head h JOIN cell c ON c.row_key = h.row_key "
                    "AND c.column_name = h.column_name AND c.ref_key = h.ref_key "
                    f"WHERE h.row_key IN ({', '.join(['%s'] * len(chunk))}) "
                    "AND h.column_name = %s",
                    [*chunk, column],
                )
            )
    return found


def appended_after(
    alias: str, after: int, limit: int, since: Any = None, with_moved: bool = False
) -> list[tuple[Any, ...]]:
    """Cells appended on ``alias`` after position ``after``, in order (the change feed, and an
    export's chunk); with ``since``, only those created at or after it. ``with_moved``: each
    row ends with its ``moved`` flag (a copy a bucket move brought)."""
    where, params = "added_at > %s", [after]
    if since is not None:
        where += " AND created_at >= %s"
        params.append(as_param(shards.connection(alias), since))
    return shards.read(
        alias,
        f"SELECT {CELL_COLUMNS}{', moved' if with_moved else ''} FROM cell WHERE {where} "
        f"ORDER BY added_at LIMIT {int(limit)}",
        params,
    )


def count(alias: str, since: Any = None) -> int:
    """Cells on ``alias`` (created at or after ``since``, if given)."""
    where, params = "", []
    if since is not None:
        where, params = " WHERE created_at >= %s", [as_param(shards.connection(alias), since)]
    return int(shards.read(alias, f"SELECT COUNT(*) FROM cell{where}", params)[0][0])


def insert_versions(
    cursor: Any, vendor: str, versions: Sequence[tuple[bytes, str, int, Any, Any]]
) -> None:
    """Store ``(row_key, column_name, ref_key, body, created_at)`` cells as they are, each
    unless that version is stored already (a restore of entity history: rerunning it adds
    nothing). ``cell_head`` is left alone: the store's own columns have no head row."""
    verb, tail = dialects.for_vendor(vendor).keep_existing("ref_key")
    cursor.executemany(
        f"{verb} INTO cell (row_key, column_name, ref_key, body, created_at) "
        f"VALUES (%s, %s, %s, %s, %s){tail}",
        versions,
    )


def last_position(alias: str) -> int:
    rows = shards.read(alias, "SELECT MAX(added_at) FROM cell", ())
    return int(rows[0][0] or 0)
