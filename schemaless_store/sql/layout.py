"""The physical layout of a shard's ``entities`` table on MariaDB, and the online
``ALTER`` between its two layouts (docs/design.md#the-entities-table).

- **clustered by id** (new stores): ``PRIMARY KEY (id)``, ``UNIQUE KEY (added_id)`` (still
  ``AUTO_INCREMENT``), ``KEY (updated, added_id)``. An index row reaches its entity with one
  primary-key descent.
- **the seed layout** (stores migrated before 0006): ``PRIMARY KEY (added_id)``,
  ``UNIQUE (id)``, ``KEY (updated)``: an index row reaches its entity through ``UNIQUE (id)``,
  then the primary key, one more descent per entity. Still read and written as before.

Every statement the store sends names columns only, never the primary key, so both layouts
serve the same SQL. SQLite keeps the seed layout (a rowid table): see the design section.
"""

from __future__ import annotations

from typing import Any

from . import dialects

TABLE = "entities"
CLUSTERED = "id"  # the first column of the primary key, by layout
SEED = "added_id"
ADDED_ID_KEY = "entities_added_id"
UPDATED_KEY = "entities_updated_added_id"
# Names the reverse ALTER gives the seed layout's keys (Django's own are kept when present).
SEED_ID_KEY = "id"
SEED_UPDATED_KEY = "entities_updated"


def keys(cursor: Any) -> dict[str, tuple[bool, tuple[str, ...]]]:
    """``{key name: (unique, columns)}`` of ``entities`` in the connection's database; empty
    if the table does not exist."""
    cursor.execute(
        "SELECT INDEX_NAME, NON_UNIQUE, COLUMN_NAME FROM information_schema.STATISTICS "
        "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s ORDER BY INDEX_NAME, SEQ_IN_INDEX",
        [TABLE],
    )
    found: dict[str, tuple[bool, tuple[str, ...]]] = {}
    for name, non_unique, column in cursor.fetchall():
        unique, columns = found.get(name, (not int(non_unique), ()))
        found[name] = (unique, (*columns, column))
    return found


def clustered_by(conn: Any) -> str | None:
    """The column ``entities`` is clustered by on this Django connection: ``"id"`` (new
    layout), ``"added_id"`` (the seed layout; always on SQLite, a rowid table), or None when
    the table does not exist."""
    if not dialects.of(conn).relayout:
        with conn.cursor() as cursor:
            return SEED if TABLE in conn.introspection.table_names(cursor) else None
    with conn.cursor() as cursor:
        primary = keys(cursor).get("PRIMARY")
    return None if primary is None else primary[1][0]


def rows_up_to(conn: Any, limit: int) -> int:
    """The rows of ``entities``, counted up to ``limit + 1`` at most (a bounded read: a big
    table costs no more than a small one)."""
    with conn.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM (SELECT 1 FROM {TABLE} LIMIT {int(limit) + 1}) t")
        return int(cursor.fetchone()[0])


def _named(found: dict[str, tuple[bool, tuple[str, ...]]], columns: tuple[str, ...]) -> list[str]:
    return [name for name, (_u, cols) in found.items() if cols == columns and name != "PRIMARY"]


def to_clustered(cursor: Any, wait: float) -> str:
    """The online ``ALTER`` that clusters a seed-layout ``entities`` by ``id``: the table is
    rebuilt in place while reads and writes go on (``LOCK=NONE``); ``WAIT``: seconds to wait
    for the metadata lock at its start and end before giving up (a long transaction holding
    it would otherwise queue every writer behind the ``ALTER``)."""
    found = keys(cursor)
    parts = ["DROP PRIMARY KEY", "ADD PRIMARY KEY (id)"]
    parts += [f"DROP INDEX `{name}`" for name in _named(found, ("id",))]
    if not _named(found, ("added_id",)):
        parts.append(f"ADD UNIQUE KEY {ADDED_ID_KEY} (added_id)")
    parts += [f"DROP INDEX `{name}`" for name in _named(found, ("updated",))]
    if not _named(found, ("updated", "added_id")):
        # The cleaner's newest-first walk orders by (updated, added_id): a key in that order,
        # which the seed layout's KEY (updated) was through its primary key suffix.
        parts.append(f"ADD KEY {UPDATED_KEY} (updated, added_id)")
    return _alter(parts, wait)


def to_seed(cursor: Any, wait: float) -> str:
    """The online ``ALTER`` back to the seed layout (``PRIMARY KEY (added_id)``): to roll the
    conversion back, and for the tests that check the seed layout still serves."""
    found = keys(cursor)
    parts = ["DROP PRIMARY KEY", "ADD PRIMARY KEY (added_id)"]
    parts += [f"DROP INDEX `{name}`" for name in _named(found, ("added_id",))]
    parts.append(f"ADD UNIQUE KEY `{SEED_ID_KEY}` (id)")
    parts += [f"DROP INDEX `{name}`" for name in _named(found, ("updated", "added_id"))]
    parts.append(f"ADD KEY {SEED_UPDATED_KEY} (updated)")
    return _alter(parts, wait)


def _alter(parts: list[str], wait: float) -> str:
    return (
        f"ALTER TABLE {TABLE} WAIT {max(1, round(wait))} {', '.join(parts)}, "
        "ALGORITHM=INPLACE, LOCK=NONE"
    )
