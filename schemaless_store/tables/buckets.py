"""Each shard's own bucket table, ``schemaless_buckets(bucket, state)``: the authority on which
buckets the shard serves (docs/design.md#the-fence; docs/resharding.md).

A bucket with no row is not the shard's. On MariaDB a write checks its buckets against its
connection's snapshot of this table (:mod:`..guards.fence`); on SQLite it reads them inside
its own transaction (:func:`serving`), and index rows are inserted only where their bucket is served
(:func:`served_insert`).

Beside it, ``schemaless_bucket_generation`` holds one number, bumped in the same transaction as
every change of states: a connection that has read the served buckets once keeps them until the
generation moves (:mod:`..guards.fence`, MariaDB's fence). :data:`epoch` counts this
process's own changes.

The tables are created and seeded by ``migrate`` on the shard (from the stored map), and changed
afterwards only by bucket moves; they are not Django models, so a test database flush keeps them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from django.db import DatabaseError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from ..config import conf
from ..exceptions import ConfigurationError
from ..sql import dialects
from ..sql.server_errors import no_table
from ..topology import bucket_map, shards

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

GENERATION_TABLE = "schemaless_bucket_generation"
# Changes of states made by this process (set_states): a connection's snapshot of the served
# buckets taken before the last one is read again (its own process need not wait for a kill).
epoch = 0


def create(alias: str, owned: Iterable[int]) -> int:
    """Create the table on ``alias`` if needed and, if it has no rows at all (a new shard, or
    one from before bucket tables), give it the buckets in ``owned``. Once it has rows only
    bucket moves change them. Returns how many rows were added."""
    conn = connections[alias]
    table = conn.ops.quote_name(TABLE)
    dialect = dialects.of(conn)
    kind, engine = dialect.int_type, dialect.table_options
    rows = [(number, OWNED) for number in owned]
    with conn.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {table} (bucket {kind} NOT NULL PRIMARY KEY, "
            f"state {kind} NOT NULL){engine}"
        )
        _create_generation(cursor, conn)
        cursor.execute(f"SELECT 1 FROM {table} LIMIT 1")
        if cursor.fetchone() is not None or not rows:
            return 0
        cursor.executemany(f"INSERT INTO {table} (bucket, state) VALUES (%s, %s)", rows)
    return len(rows)


def _create_generation(cursor: Any, conn: BaseDatabaseWrapper) -> None:
    """The one-row generation table, if missing (a store from before it gets it here too)."""
    dialect = dialects.of(conn)
    cursor.execute(
        f"CREATE TABLE IF NOT EXISTS {GENERATION_TABLE} (id INT NOT NULL PRIMARY KEY, "
        f"generation {dialect.counter_type} NOT NULL){dialect.table_options}"
    )
    cursor.execute(
        f"{dialect.insert_ignore} INTO {GENERATION_TABLE} (id, generation) VALUES (1, 1)"
    )


def generation(cursor: Any) -> int | None:
    """The shard's generation of bucket states (None: no generation table yet)."""
    try:
        cursor.execute(f"SELECT generation FROM {GENERATION_TABLE} WHERE id = 1")
    except Exception as exc:  # Django's error, or the driver's on a statement_cursor
        if no_table(exc):
            return None
        raise
    found = cursor.fetchone()
    return None if found is None else int(found[0])


def served_now(cursor: Any, alias: str) -> tuple[int | None, frozenset[int]]:
    """``(generation, the buckets served)`` of the shard ``alias``, read in one statement (so
    the two agree); the generation is None where the shard has no generation table yet."""
    try:
        if generation(cursor) is None:
            cursor.execute(f"SELECT bucket FROM {TABLE} WHERE state IN ({_SERVING_SQL})")
            return None, frozenset(int(row[0]) for row in cursor.fetchall())
        cursor.execute(
            f"SELECT g.generation, b.bucket FROM {GENERATION_TABLE} g LEFT JOIN {TABLE} b "
            f"ON b.state IN ({_SERVING_SQL}) WHERE g.id = 1"
        )
    except Exception as exc:  # Django's error, or the driver's on a statement_cursor
        if no_table(exc):
            raise not_migrated(alias) from exc
        raise
    rows = cursor.fetchall()
    found = int(rows[0][0]) if rows else None
    return found, frozenset(int(row[1]) for row in rows if row[1] is not None)


def not_migrated(alias: str) -> ConfigurationError:
    return ConfigurationError(f"shard {alias!r} has no {TABLE} table: run manage.py migrateall")


def serving(conn: BaseDatabaseWrapper, buckets: Sequence[int]) -> set[int]:
    """Which of ``buckets`` the shard of ``conn`` serves, read inside the caller's transaction
    (MariaDB: ``LOCK IN SHARE MODE``, held until it ends)."""
    marks = ", ".join(["%s"] * len(buckets))
    sql = f"SELECT bucket FROM {TABLE} WHERE bucket IN ({marks}) AND state IN ({_SERVING_SQL})"
    sql += dialects.of(conn).for_share
    try:
        with shards.statement_cursor(conn) as cursor:
            cursor.execute(sql, list(buckets))
            return {row[0] for row in cursor.fetchall()}
    except DatabaseError as exc:
        if no_table(exc):
            raise not_migrated(conn.alias) from exc
        raise


def states(alias: str, buckets: Sequence[int] | None = None) -> dict[int, int]:
    """``{bucket: state}`` of the rows on ``alias`` (of ``buckets``, or all)."""
    if buckets is not None and not buckets:
        return {}
    return {int(b): int(s) for b, s in shards.read(alias, *_states_sql(buckets))}


def states_in(cursor: Any, buckets: Sequence[int]) -> dict[int, int]:
    """:func:`states` of ``buckets``, read on ``cursor`` (in its open transaction)."""
    if not buckets:
        return {}
    cursor.execute(*_states_sql(buckets))
    return {int(b): int(s) for b, s in cursor.fetchall()}


def _states_sql(buckets: Sequence[int] | None) -> tuple[str, list[Any]]:
    sql = f"SELECT bucket, state FROM {TABLE}"
    if buckets is None:
        return sql, []
    return f"{sql} WHERE bucket IN ({', '.join(['%s'] * len(buckets))})", list(buckets)


def set_states(alias: str, buckets: Sequence[int], state: int | None) -> set[int]:
    """Give ``buckets`` on ``alias`` the state ``state`` (None: delete their rows) and bump the
    shard's generation, in one transaction (the shard's own connection; inside its transaction
    when one is open). Returns the buckets the shard served before and serves no more: the
    caller that withdraws buckets this way must end the connections that may still believe
    they are served (:func:`..guards.fence.withdraw` does both)."""
    global epoch
    if not buckets:
        return set()
    conn = connections[alias]
    marks = ", ".join(["%s"] * len(buckets))
    with conn.cursor() as cursor:
        if generation(cursor) is None:  # DDL commits: before the transaction, only if missing
            _create_generation(cursor, conn)
    with transaction.atomic(using=alias), conn.cursor() as cursor:
        lock = dialects.of(conn).for_update
        cursor.execute(
            f"SELECT bucket FROM {TABLE} WHERE bucket IN ({marks}) "
            f"AND state IN ({_SERVING_SQL}){lock}",
            list(buckets),
        )
        withdrawn = {int(row[0]) for row in cursor.fetchall()}
        if state is None:
            cursor.execute(f"DELETE FROM {TABLE} WHERE bucket IN ({marks})", list(buckets))
        else:
            verb = dialects.of(conn).insert_or_replace
            cursor.executemany(
                f"{verb} INTO {TABLE} (bucket, state) VALUES (%s, %s)",
                [(number, state) for number in buckets],
            )
        if state in SERVING:
            withdrawn = set()
        cursor.execute(f"UPDATE {GENERATION_TABLE} SET generation = generation + 1 WHERE id = 1")
    epoch += 1
    return withdrawn


def served_insert(table: str, names: Sequence[str], *, idempotent: bool) -> tuple[str, str]:
    """SQLite: the text before and after ``(*values, bucket)`` rows (placeholders) of an
    ``INSERT`` into ``table`` that inserts only the rows whose bucket this shard serves, in one
    statement (the fence of an index row on SQLite; MariaDB checks in the client,
    :mod:`..guards.fence`)::

        INSERT INTO t (a, entity_id) SELECT r.column1, r.column2 FROM (VALUES ...) r
        JOIN schemaless_buckets b ON b.bucket = r.column3 AND b.state IN (1, 2)

    ``names`` are quoted column names, the entity id's last. ``idempotent``: a row already
    there is left as it is; otherwise it raises ``IntegrityError``."""
    cols = ", ".join(names)
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
        except bucket_map.StaleRead:
            if time.monotonic() >= deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.1)
            bucket_map.refresh()


def read_owned(key: bytes, read: Callable[[str], T]) -> T:
    """``read(alias)`` on the shard that owns ``key``, confirmed (:func:`confirm_read`) and run
    again by the new map if a bucket move overtook it."""

    def attempt() -> T:
        used = bucket_map.current()
        alias = used.owners[bucket_map.bucket_for(key)]
        found = read(alias)
        confirm_read(alias, used)
        return found

    return retrying_stale(attempt)


def confirm_read(alias: str, used: bucket_map.BucketMap) -> None:
    """After a read on ``alias`` routed by the map ``used``:
    :class:`~..topology.bucket_map.StaleRead` unless what it read is the data.

    The common case costs a clock read: the map is younger than its read bound and no bucket
    is moving. A move marks its buckets moving in the map at least one read bound before it
    flips them, so a read routed by a map without the mark finished before the flip. A read of
    a bucket marked moving is confirmed by the shard's own table afterwards: a bucket it
    still owns (or holds fenced) was its own while the read ran. A map older than the bound is
    read again first. A map kept because the stored one could not be read (``unverified``: the
    metadata database is unreachable) vouches for nothing, since a move may have finished
    meanwhile: every bucket it gives ``alias`` is confirmed by the shard's table."""
    if (
        not used.moving
        and not used.unverified
        and time.monotonic() - used.fetched_at < (used.read_bound)
    ):
        return
    if time.monotonic() - used.fetched_at >= used.read_bound:
        fresh = bucket_map.refresh()
        if fresh.owners != used.owners:
            raise bucket_map.StaleRead()
        used = fresh
    if used.unverified:
        wanted = used.buckets_of(alias)
    else:
        wanted = sorted(n for n in used.moving if used.owners[n] == alias)
    if not wanted:
        return
    found = states(alias, wanted)
    if any(found.get(number) not in AUTHORITATIVE for number in wanted):
        bucket_map.refresh()
        raise bucket_map.StaleRead()
