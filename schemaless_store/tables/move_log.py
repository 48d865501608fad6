"""Change capture on a source shard while a move copies it: triggers that log every change.

While a shard is the source of a move, an ``AFTER INSERT``, ``UPDATE`` and ``DELETE`` trigger
on each of its tables adds ``(table, key)`` to ``schemaless_move_log`` in the writer's own
statement (so in its transaction: a rolled-back write logs nothing). This is how
pt-online-schema-change and LHM catch the changes made during a copy; Ghostferry and Vitess
read the binlog instead, which the embedded SQLite default does not have.

A replay reads the rows logged, makes the target's rows of each key what the source's are
(:mod:`..moves.mover`), then deletes the entries it handled. It keeps no position: an entry whose
transaction commits after a later one was read is still in the table on the next read.

A trigger left behind must never fail a write. MariaDB keeps a table's triggers in two files
(``.TRG``, and a ``.TRN`` per trigger name); a history soak found a trigger that outlived its
move on a server whose sessions and processes were being killed, still firing while
``DROP TRIGGER IF EXISTS`` found no trigger by its name, so every write it fired on failed for
want of the dropped log (docs/reliability.md). On MariaDB each trigger therefore ignores a
missing log (a ``CONTINUE`` handler for "no such table", nothing else), and :func:`remove`
names any trigger it could not drop (:func:`leftovers`).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from typing import Any

from django.db import DatabaseError, connections

from ..config.indexes import is_identifier
from ..exceptions import ConfigurationError, ShardUnavailable
from ..sql import dialects, server_errors
from ..topology import servers, shards
from .moved_rows import MovedTable

logger = logging.getLogger("schemaless_store.moves")

LOG = "schemaless_move_log"
PREFIX = "schemaless_mv_"
# MariaDB's "no such table": a trigger whose log is gone does nothing.
IGNORE_MISSING_LOG = f"DECLARE CONTINUE HANDLER FOR {server_errors.ER_NO_SUCH_TABLE} BEGIN END"
EVENTS = (("INSERT", "NEW", "i"), ("UPDATE", "NEW", "u"), ("DELETE", "OLD", "d"))


def trigger_name(table: str, suffix: str) -> str:
    digest = hashlib.blake2b(table.encode(), digest_size=6).hexdigest()
    return f"{PREFIX}{digest}_{suffix}"


def install(alias: str, tables: Sequence[MovedTable]) -> None:
    """Create the log table and the triggers of ``tables`` on ``alias`` (idempotent)."""
    conn = connections[alias]
    quote = conn.ops.quote_name
    dialect = dialects.of(conn)
    with shards.errors_named(alias), conn.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {LOG} (seq {dialect.serial_key}, "
            f"tbl {dialect.varchar(64)} NOT NULL, row_key {dialect.varbinary(16)} NOT NULL)"
            f"{dialect.table_options}"
        )
        for table in tables:
            if not is_identifier(table.name):
                raise ConfigurationError(f"{table.name!r} is not a valid table name")
            key = quote(table.log_key())
            for event, row, suffix in EVENTS:
                name = trigger_name(table.name, suffix)
                action = f"INSERT INTO {LOG} (tbl, row_key) VALUES ('{table.name}', {row}.{key})"
                cursor.execute(
                    dialect.trigger(name, event, quote(table.name), action, IGNORE_MISSING_LOG)
                )


def remove(alias: str, tables: Sequence[MovedTable]) -> list[str]:
    """Drop the triggers of ``tables`` and the log on ``alias`` (idempotent). Returns the
    triggers the server still lists afterwards (:func:`leftovers`, logged): they do nothing
    without the log, and an operator may drop them by hand (docs/resharding.md)."""
    conn = connections[alias]
    with shards.errors_named(alias), conn.cursor() as cursor:
        for table in tables:
            for _event, _row, suffix in EVENTS:
                cursor.execute(f"DROP TRIGGER IF EXISTS {trigger_name(table.name, suffix)}")
        cursor.execute(f"DROP TABLE IF EXISTS {LOG}")
    left = leftovers(alias)
    if left:
        logger.warning(
            "%s: the server still lists the move triggers %s after they were dropped (a "
            "trigger whose name it no longer finds); without the log they do nothing "
            "(docs/resharding.md#left-over-triggers)",
            alias,
            ", ".join(left),
        )
    return left


def leftovers(alias: str) -> list[str]:
    """The move triggers the server lists on ``alias``'s database (MariaDB; SQLite: none, its
    triggers are rows of its schema table, dropped atomically)."""
    if not dialects.of(connections[alias]).information_schema:
        return []
    try:
        rows = shards.read(
            alias,
            "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = "
            "DATABASE() AND LEFT(TRIGGER_NAME, %s) = %s ORDER BY TRIGGER_NAME",
            [len(PREFIX), PREFIX],
        )
    except (DatabaseError, ShardUnavailable) as exc:  # a report only: never fails a removal
        logger.warning("%s: cannot list the move triggers left (%s)", alias, exc)
        return []
    return [str(name) for (name,) in rows]


def installed(alias: str) -> bool:
    conn = connections[alias]
    with shards.errors_named(alias), conn.cursor() as cursor:
        return LOG in conn.introspection.table_names(cursor)


def read(alias: str, limit: int) -> list[tuple[int, str, bytes]]:
    """The oldest ``limit`` entries ``(seq, table, key)`` still in the log.

    On Galera the read waits until this node has applied what the cluster committed before it
    (``wsrep_sync_wait``): an entry a writer committed through another node just before the
    fence ended its session is read too, by the final replay and by the verification (a node
    applies other nodes' writes a moment after they commit)."""
    sql = f"SELECT seq, tbl, row_key FROM {LOG} ORDER BY seq LIMIT %s"
    if servers.is_galera(alias):
        sql = f"SET STATEMENT wsrep_sync_wait = 1 FOR {sql}"
    rows = shards.read(alias, sql, [limit])
    return [(int(seq), str(tbl), bytes(key)) for seq, tbl, key in rows]


def forget(alias: str, seqs: Sequence[int]) -> None:
    """Delete handled entries."""
    conn = connections[alias]
    params: list[Any] = list(seqs)
    with shards.errors_named(alias), conn.cursor() as cursor:
        for start in range(0, len(params), 500):
            chunk = params[start : start + 500]
            cursor.execute(
                f"DELETE FROM {LOG} WHERE seq IN ({', '.join(['%s'] * len(chunk))})", chunk
            )


def pending(alias: str) -> int:
    return int(shards.read(alias, f"SELECT COUNT(*) FROM {LOG}", [])[0][0])
