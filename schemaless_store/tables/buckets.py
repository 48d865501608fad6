"""Each shard's own bucket table, ``schemaless_buckets(bucket, state)``: the authority on which
buckets the shard serves (docs/design.md#fence; docs/resharding.md).

A bucket with no row is not the shard's. Every write checks the buckets it touches inside its
own transaction (:func:`serving`; on MySQL with a shared lock, so a move that fences a bucket
waits for the writes already under way and then refuses new ones); index rows are inserted
only where their bucket is served (:func:`joined_insert`).

The table is created and seeded by ``migrate`` on the shard (from the stored map), and changed
afterwards only by bucket moves; it is not a Django model, so a test database flush keeps it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from django.db import DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from .. import conf, shardmap, shards
from ..exceptions import ConfigurationError

T = TypeVar("T")

TABLE = "schemaless_buckets"

OWNED = 1  # the shard serves the bucket
MOVING = 2  # the shard serves it while a move copies it away
FENCED = 3  # a move is flipping it: writes wait for the flip
GONE = 4  # moved away: the copies left here are not the data
INCOMING = 5  # a move is copying it here: nothing is served yet
SERVING = (OWNED, MOVING)
NAMES = {OWNED: "owned", MOVING: "moving", FENCED: "fenced", GONE: "gone", INCOMING: "incoming"}

_SERVING_SQL = ", ".join(str(s) for s in SERVING)


def create(alias: str, owned: Iterable[int]) -> int:
    """Create the table on ``alias`` if needed and, if it has no rows at all (a new shard, or
    one from before bucket tables), give it the buckets in ``owned``. Once it has rows only
    bucket moves change them. Returns how many rows were added."""
    conn = connections[alias]
    table = conn.ops.quote_name(TABLE)
    kind = "INT" if conn.vendor == "mysql" else "INTEGER"
    engine = " ENGINE=InnoDB" if conn.vendor == "mysql" else ""
    rows = [(number, OWNED) for number in owned]
    with conn.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {table} (bucket {kind} NOT NULL PRIMARY KEY, "
            f"state {kind} NOT NULL){engine}"
        )
        cursor.execute(f"SELECT 1 FROM {table} LIMIT 1")
        if cursor.fetchone() is not None or not rows:
            return 0
        cursor.executemany(f"INSERT INTO {table} (bucket, state) VALUES (%s, %s)", rows)
    return len(rows)


def serving(conn: BaseDatabaseWrapper, buckets: Sequence[int]) -> set[int]:
    """Which of ``buckets`` the shard of ``conn`` serves, read inside the caller's transaction
    (MySQL: ``LOCK IN SHARE MODE``, held until it ends)."""
    marks = ", ".join(["%s"] * len(buckets))
    sql = f"SELECT bucket FROM {TABLE} WHERE bucket IN ({marks}) AND state IN ({_SERVING_SQL})"
    if conn.vendor == "mysql":
        sql += " LOCK IN SHARE MODE"
    try:
        with shards.statement_cursor(conn) as cursor:
            cursor.execute(sql, list(buckets))
            return {row[0] for row in cursor.fetchall()}
    except DatabaseError as exc:
        if _no_table(exc):
            raise ConfigurationError(
                f"shard {conn.alias!r} has no {TABLE} table: run manage.py migrateall"
            ) from exc
        raise


def _no_table(exc: DatabaseError) -> bool:
    """MySQL 1146 (no such table), or SQLite's "no such table"."""
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
    return code == 1146 or "no such table" in str(exc)


def states(alias: str, buckets: Sequence[int] | None = None) -> dict[int, int]:
    """``{bucket: state}`` of the rows on ``alias`` (of ``buckets``, or all)."""
    sql = f"SELECT bucket, state FROM {TABLE}"
    params: list[Any] = []
    if buckets is not None:
        if not buckets:
            return {}
        sql += f" WHERE bucket IN ({', '.join(['%s'] * len(buckets))})"
        params = list(buckets)
    return {int(b): int(s) for b, s in shards.read(alias, sql, params)}


def set_states(alias: str, buckets: Sequence[int], state: int | None) -> None:
    """Give ``buckets`` on ``alias`` the state ``state`` (None: delete their rows), in one
    statement (the shard's own connection; inside its transaction when one is open)."""
    if not buckets:
        return
    conn = connections[alias]
    with conn.cursor() as cursor:
        if state is None:
            marks = ", ".join(["%s"] * len(buckets))
            cursor.execute(f"DELETE FROM {TABLE} WHERE bucket IN ({marks})", list(buckets))
            return
        verb = "REPLACE" if conn.vendor == "mysql" else "INSERT OR REPLACE"
        cursor.executemany(
            f"{verb} INTO {TABLE} (bucket, state) VALUES (%s, %s)",
            [(number, state) for number in buckets],
        )


BUCKET_COLUMN = "schemaless_bucket"


def fenced_from(bucket: int) -> str:
    """`` FROM schemaless_buckets WHERE bucket = N AND state IN (served) LOCK IN SHARE MODE``:
    the tail of a MySQL ``INSERT ... SELECT <one row>`` that inserts it only while the shard
    serves ``bucket`` (and holds the bucket's row share-locked while it runs)."""
    return (
        f" FROM {TABLE} WHERE bucket = {int(bucket)} AND state IN ({_SERVING_SQL}) "
        "LOCK IN SHARE MODE"
    )


def served_insert(
    table: str, names: Sequence[str], vendor: str, *, idempotent: bool
) -> tuple[str, str]:
    """The text before and after ``(*values, bucket)`` rows (``VALUES`` rows: literals or
    placeholders) of an ``INSERT`` into ``table`` that inserts only the rows whose bucket this
    shard serves, in one statement (MySQL: their bucket rows share-locked while it runs)::

        INSERT INTO t (a, entity_id) WITH r (a, entity_id, schemaless_bucket) AS (VALUES ...)
        SELECT r.a, r.entity_id FROM r JOIN schemaless_buckets b ON b.bucket = r.schemaless_bucket
        AND b.state IN (1, 2) LOCK IN SHARE MODE ON DUPLICATE KEY UPDATE ...

    ``names`` are quoted column names, the entity id's last. ``idempotent``: a row already
    there is left as it is; otherwise it raises ``IntegrityError``. With ``CLIENT_FOUND_ROWS``
    (Django's MySQL connections) the row count on MySQL is the number of rows served."""
    cols = ", ".join(names)
    if vendor == "mysql":
        picked = ", ".join(f"r.{n}" for n in names)
        tail = (
            f") SELECT {picked} FROM r JOIN {TABLE} b ON b.bucket = r.{BUCKET_COLUMN} "
            f"AND b.state IN ({_SERVING_SQL}) LOCK IN SHARE MODE"
        )
        if idempotent:
            entity = names[-1]
            tail += f" ON DUPLICATE KEY UPDATE {entity} = {table}.{entity}"
        return f"INSERT INTO {table} ({cols}) WITH r ({cols}, {BUCKET_COLUMN}) AS (VALUES ", tail
    # SQLite names a VALUES list's columns column1, column2, ...; the statement must start with
    # INSERT for the driver to report its row count.
    picked = ", ".join(f"r.column{n + 1}" for n in range(len(names)))
    verb = "INSERT OR IGNORE" if idempotent else "INSERT"
    return (
        f"{verb} INTO {table} ({cols}) SELECT {picked} FROM (VALUES ",
        f") r JOIN {TABLE} b ON b.bucket = r.column{len(names) + 1} "
        f"AND b.state IN ({_SERVING_SQL})",
    )


# States in which a shard's rows of a bucket are the data: served, or fenced for a flip (no
# write can change them meanwhile, and the target does not serve them yet).
AUTHORITATIVE = (OWNED, MOVING, FENCED)


def retrying_stale(read: Callable[[], T]) -> T:
    """Run ``read`` again, by the map read again, while it raises ``StaleRead``: a flip under
    way has taken the buckets from the old shard and not yet named the new one in the map, so
    a reader waits for it, as a writer does, for at most ``SCHEMALESS["MOVE_WAIT"]``."""
    deadline = time.monotonic() + conf.get().move_wait
    pause = 0.005
    while True:
        try:
            return read()
        except shardmap.StaleRead:
            if time.monotonic() >= deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.1)
            shardmap.refresh()


def read_owned(key: bytes, read: Callable[[str], T]) -> T:
    """``read(alias)`` on the shard that owns ``key``, confirmed (:func:`confirm_read`) and run
    again by the new map if a bucket move overtook it."""

    def attempt() -> T:
        used = shardmap.current()
        alias = used.owners[shards.bucket_for(key)]
        found = read(alias)
        confirm_read(alias, used)
        return found

    return retrying_stale(attempt)


def confirm_read(alias: str, used: shardmap.BucketMap) -> None:
    """After a read on ``alias`` routed by the map ``used``: :class:`~..shardmap.StaleRead`
    unless what it read is the data.

    The common case costs a clock read: the map is younger than its read bound and no bucket
    is moving. A move marks its buckets moving in the map at least one read bound before it
    flips them, so a read routed by a map without the mark finished before the flip. A read of
    a bucket marked moving is confirmed by the shard's own table afterwards: a bucket it
    still owns (or holds fenced) was its own while the read ran. A map older than the bound is
    read again first."""
    if not used.moving and time.monotonic() - used.fetched_at < used.read_bound:
        return
    if time.monotonic() - used.fetched_at >= used.read_bound:
        fresh = shardmap.refresh()
        if fresh.owners != used.owners:
            raise shardmap.StaleRead()
        used = fresh
    wanted = sorted(n for n in used.moving if used.owners[n] == alias)
    if not wanted:
        return
    found = states(alias, wanted)
    if any(found.get(number) not in AUTHORITATIVE for number in wanted):
        shardmap.refresh()
        raise shardmap.StaleRead()
