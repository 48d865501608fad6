"""What a ``mapentities`` run keeps on the shards: three small tables, created on first use on
every shard (no migration; bucket moves do not copy them: a run reads them on every shard).

- ``schemaless_map_runs``: one row per (run, walked shard): the checkpoint (the last
  ``added_id``, or the last id of a ``--where`` run, done so far), the walk's end, the map
  version it began under, and what it did (cumulative counts).
- ``schemaless_map_saved``: (run, entity id) of every entity the run saved, inserted *in the
  transaction that saves the entity*: a run killed at any point and run again skips what it
  saved, whatever its checkpoint says, even after a bucket move gave the entity another
  ``added_id`` on another shard.
- ``schemaless_map_failures``: (run, entity id, message) of the entities whose function raised;
  a rerun retries those, and forgets each once it goes through.

A run is named by :func:`run_key`: a digest of the function's dotted path and its ``--where``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from django.db import transaction

from ..exceptions import ShardUnavailable
from ..sql import dialects
from ..topology import shards
from ..topology.write_lock import write_lock
from .entities import chunks

RUNS, SAVED, FAILURES = "schemaless_map_runs", "schemaless_map_saved", "schemaless_map_failures"
COUNTS = ("seen", "changed", "deleted", "conflicts", "failed", "skipped")
_DDL = {
    RUNS: (
        "CREATE TABLE IF NOT EXISTS {t} (run CHAR(32) NOT NULL, shard VARCHAR(64) NOT NULL, "
        "name VARCHAR(400) NOT NULL, last_added_id BIGINT NOT NULL, last_id {bin} NULL, "
        "upto BIGINT NOT NULL, map_version BIGINT NOT NULL, done SMALLINT NOT NULL, "
        + ", ".join(f"{c} BIGINT NOT NULL" for c in COUNTS)
        + ", PRIMARY KEY (run, shard))"
    ),
    SAVED: (
        "CREATE TABLE IF NOT EXISTS {t} (run CHAR(32) NOT NULL, id {bin} NOT NULL, "
        "PRIMARY KEY (run, id))"
    ),
    FAILURES: (
        "CREATE TABLE IF NOT EXISTS {t} (run CHAR(32) NOT NULL, id {bin} NOT NULL, "
        "message TEXT NOT NULL, PRIMARY KEY (run, id))"
    ),
}
# Tries on a fresh connection after one was lost (a move's fence ends the store's sessions).
LOST_ATTEMPTS = 3
# At most this many characters of a failure's message are kept.
MESSAGE_CHARS = 1000


def run_key(name: str) -> str:
    """The key of a run (``name``: the function's path and the ``--where``, as text)."""
    return hashlib.blake2b(name.encode(), digest_size=16).hexdigest()


@dataclass
class Checkpoint:
    """One (run, walked shard) row."""

    run: str
    shard: str
    name: str
    last_added_id: int = 0
    last_id: bytes | None = None
    upto: int = 0
    map_version: int = 0
    done: bool = False
    seen: int = 0
    changed: int = 0
    deleted: int = 0
    conflicts: int = 0
    failed: int = 0
    skipped: int = 0


_COLUMNS = [f.name for f in fields(Checkpoint)]


def _write(alias: str, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
    """Run ``statements`` in a short transaction of their own on ``alias`` (under the store's
    SQLite write lock, as every write to a shard is). A connection lost meanwhile (a bucket
    move's fence ends the store's sessions on a source) is replaced and the transaction run
    again: each is a set of deletes and inserts that may run twice."""
    for attempt in range(LOST_ATTEMPTS + 1):
        try:
            with (
                shards.errors_named(alias),
                write_lock(),
                transaction.atomic(using=alias),
                shards.statement_cursor(shards.connection(alias)) as cursor,
            ):
                for sql, params in statements:
                    cursor.execute(sql, params)
            return
        except ShardUnavailable as exc:
            if not exc.lost or attempt == LOST_ATTEMPTS:
                raise


def create_tables(alias: str) -> None:
    """The three tables on ``alias``, if absent (DDL: outside any transaction)."""
    conn = shards.connection(alias)
    dialect = dialects.of(conn)
    binary, suffix = dialect.varbinary(16), dialect.table_options
    with conn.cursor() as cursor:
        for table, ddl in _DDL.items():
            cursor.execute(ddl.format(t=table, bin=binary) + suffix)


def load(run: str, aliases: Sequence[str]) -> dict[str, Checkpoint]:
    """The run's checkpoints, by walked shard, read on every shard in ``aliases``."""
    found: dict[str, Checkpoint] = {}
    for alias in aliases:
        rows = shards.read(alias, f"SELECT {', '.join(_COLUMNS)} FROM {RUNS} WHERE run = %s", [run])
        for row in rows:
            point = Checkpoint(**dict(zip(_COLUMNS, row, strict=True)))
            point.done = bool(point.done)
            point.last_id = None if point.last_id is None else bytes(point.last_id)
            found[point.shard] = point
    return found


def save(point: Checkpoint) -> None:
    """Write the checkpoint on its walked shard (its own autocommitted statements)."""
    values = [getattr(point, c) for c in _COLUMNS]
    values[_COLUMNS.index("done")] = int(point.done)
    marks = ", ".join(["%s"] * len(_COLUMNS))
    _write(
        point.shard,
        [
            (f"DELETE FROM {RUNS} WHERE run = %s AND shard = %s", [point.run, point.shard]),
            (f"INSERT INTO {RUNS} ({', '.join(_COLUMNS)}) VALUES ({marks})", values),
        ],
    )


def mark_saved(cursor: Any, vendor: str, run: str, keys: Sequence[bytes]) -> None:
    """Inside the transaction that saves the entities: note them as saved by the run."""
    if keys:
        verb = dialects.for_vendor(vendor).insert_ignore
        cursor.executemany(
            f"{verb} INTO {SAVED} (run, id) VALUES (%s, %s)", [(run, key) for key in keys]
        )


def saved_among(run: str, keys: Sequence[bytes], aliases: Sequence[str]) -> set[bytes]:
    """The ``keys`` the run saved before, on any shard in ``aliases``."""
    found: set[bytes] = set()
    for alias in aliases:
        for chunk in chunks(list(keys), 500):
            marks = ", ".join(["%s"] * len(chunk))
            rows = shards.read(
                alias, f"SELECT id FROM {SAVED} WHERE run = %s AND id IN ({marks})", [run, *chunk]
            )
            found.update(bytes(row[0]) for row in rows)
    return found


def has_saved(run: str, aliases: Sequence[str]) -> bool:
    return any(
        shards.read(alias, f"SELECT 1 FROM {SAVED} WHERE run = %s LIMIT 1", [run])
        for alias in aliases
    )


def record_failure(alias: str, run: str, key: bytes, message: str) -> None:
    _write(
        alias,
        [
            (f"DELETE FROM {FAILURES} WHERE run = %s AND id = %s", [run, key]),
            (
                f"INSERT INTO {FAILURES} (run, id, message) VALUES (%s, %s, %s)",
                [run, key, message[:MESSAGE_CHARS]],
            ),
        ],
    )


def forget_failures(alias: str, run: str, keys: Iterable[bytes]) -> None:
    sql = f"DELETE FROM {FAILURES} WHERE run = %s AND id = %s"
    _write(alias, [(sql, [run, key]) for key in keys])


def failures(alias: str, run: str) -> list[tuple[bytes, str]]:
    """``(entity id, message)`` of the failures recorded on ``alias``, by id."""
    rows = shards.read(
        alias, f"SELECT id, message FROM {FAILURES} WHERE run = %s ORDER BY id", [run]
    )
    return [(bytes(key), str(message)) for key, message in rows]


def forget_run(run: str, aliases: Sequence[str]) -> None:
    """``--restart``: drop the run's checkpoints, saved marks and failures everywhere."""
    for alias in aliases:
        _write(alias, [(f"DELETE FROM {t} WHERE run = %s", [run]) for t in (RUNS, SAVED, FAILURES)])
