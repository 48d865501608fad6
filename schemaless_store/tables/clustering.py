"""Clustering ``entities`` by ``id`` on MariaDB shards (docs/design.md#the-entities-table):
what ``migrate`` converts at once, what ``manage.py clusterentities`` converts online, and what
the system check ``schemaless.W006`` reports.

``migrate`` never starts a long rebuild: migration 0006 converts a shard's table only while it
holds at most :data:`AT_MIGRATE_MAX_ROWS` rows (a new store's is empty); a bigger one keeps the
seed layout, which serves as before, until the command converts it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.db import OperationalError, connections

from ..config import conf
from ..sql import dialects, layout
from ..sql.server_errors import ER_LOCK_WAIT_TIMEOUT, code_of

# Rows migrate converts itself: about a second of rebuild (~1.8 s per 100,000 rows measured
# on the busy test machine, docs/upgrading.md#clustering-entities-by-id).
AT_MIGRATE_MAX_ROWS = 50_000
COMMAND = "manage.py clusterentities"


def seed_layout_shards(aliases: list[str] | None = None) -> list[str]:
    """The MariaDB shards among ``aliases`` (default: all) whose ``entities`` is still clustered
    by ``added_id``."""
    return [
        alias
        for alias in (aliases if aliases is not None else list(conf.get().shards))
        if on_seed_layout(connections[alias])
    ]


def on_seed_layout(conn: Any) -> bool:
    """Whether this MariaDB connection's ``entities`` is clustered by ``added_id``."""
    return dialects.of(conn).relayout and layout.clustered_by(conn) == layout.SEED


def cluster(
    alias: str,
    wait: float = 5.0,
    attempts: int = 12,
    say: Callable[[str], None] = lambda _line: None,
) -> float | None:
    """Cluster ``alias``'s ``entities`` by ``id`` with one online ``ALTER`` (reads and writes
    go on); seconds it took, or None if it was clustered already. The ``ALTER`` gives up on its
    metadata lock after ``wait`` seconds (it would queue every writer behind a long transaction)
    and is tried again, ``attempts`` times in all."""
    conn = connections[alias]
    if not on_seed_layout(conn):
        return None
    with conn.cursor() as cursor:
        statement = layout.to_clustered(cursor, wait)
    for attempt in range(1, attempts + 1):
        began = time.perf_counter()
        try:
            with conn.cursor() as cursor:
                cursor.execute(statement)
            return time.perf_counter() - began
        except OperationalError as exc:
            if code_of(exc) != ER_LOCK_WAIT_TIMEOUT or attempt == attempts:
                raise
            say(f"{alias}: a transaction held entities' metadata lock past {wait:g} s; again")
    raise AssertionError("unreachable")


def migrate_forwards(apps: Any, schema_editor: Any) -> None:
    """Migration 0006: a shard's small (or new, empty) ``entities`` clustered by ``id``; a big
    one left to :data:`COMMAND` (``schemaless.W006`` names it)."""
    conn = schema_editor.connection
    if on_seed_layout(conn) and layout.rows_up_to(conn, AT_MIGRATE_MAX_ROWS) <= AT_MIGRATE_MAX_ROWS:
        cluster(conn.alias)
