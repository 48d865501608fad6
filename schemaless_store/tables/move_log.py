"""Change capture on a source shard while a move copies it: triggers that log every change
(and on its target, from the flip to the verdict, triggers that record pre-images:
:mod:`.pre_images`).

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

import logging
from collections.abc import Sequence
from typing import Any

from django.db import DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from ..config.indexes import is_identifier
from ..exceptions import ConfigurationError, MoveRefused, ShardUnavailable
from ..sql import dialects, server_errors, sessions
from ..topology import servers, shards
from . import pre_images as pre
from .capture_probe import EVENTS, LOG, PREFIX, prove, trigger_name
from .moved_rows import MovedTable

logger = logging.getLogger("schemaless_store.moves")

# Rows per statement when a kept log or pre-image table is emptied (:func:`keeps_tables`).
KEPT_CLEAR_BATCH = 1000
# MariaDB's "no such table": a trigger whose log is gone does nothing.
IGNORE_MISSING_LOG = f"DECLARE CONTINUE HANDLER FOR {server_errors.ER_NO_SUCH_TABLE} BEGIN END"


def install(alias: str, tables: Sequence[MovedTable], *, pre_images: bool = False) -> list[str]:
    """Create the log table and the triggers of ``tables`` on ``alias`` (idempotent), and
    prove each trigger by a probe write (:func:`prove`): ``CREATE TRIGGER IF NOT EXISTS``
    passes over a name that is taken, whatever is behind it (a trigger that logs nothing, or
    on MariaDB a name whose trigger is gone). A trigger that logs nothing is dropped and
    created again, then proven again; one that still logs nothing refuses the move
    (:class:`MoveRefused`, naming it and the next step). Returns the triggers recreated.

    ``pre_images`` (a move's target): the triggers record pre-images instead
    (:mod:`.pre_images`), in tables made afresh (on Galera, kept ones emptied:
    :func:`keeps_tables`), with their own trigger names (the sources' kind left on the shard
    by an earlier move never stands in for them)."""
    conn = connections[alias]
    events = pre.EVENTS if pre_images else EVENTS
    with shards.errors_named(alias), conn.cursor() as cursor:
        dialect = dialects.of(conn)
        if pre_images:  # nothing recorded before the flip counts: fresh tables
            for table in tables:
                for *_, suffix in events:
                    drop_trigger(cursor, trigger_name(table.name, suffix))
            if not keeps_tables(alias):
                pre.drop(cursor, tables)
            pre.create(cursor, conn, tables)
        else:
            cursor.execute(
                f"CREATE TABLE IF NOT EXISTS {LOG} (seq {dialect.serial_key}, "
                f"tbl {dialect.varchar(64)} NOT NULL, row_key {dialect.varbinary(16)} NOT NULL)"
                f"{dialect.table_options}"
            )
    if pre_images and keeps_tables(alias):
        pre.clear(alias, tables, _clear_batch(alias))  # a kept table's rows of an earlier move
    with shards.errors_named(alias), conn.cursor() as cursor:
        for table in tables:
            for event in events:
                cursor.execute(_create(conn, table, event))
    failing = prove(alias, tables, pre_images=pre_images)
    if not failing:
        return []
    logger.warning(
        "%s: the move triggers %s logged nothing for a probe write; creating them again",
        alias,
        ", ".join(failing),
    )
    with shards.errors_named(alias), conn.cursor() as cursor:
        for table in tables:
            for event in events:
                name = trigger_name(table.name, event[2])
                if name in failing:
                    drop_trigger(cursor, name)
                    cursor.execute(_create(conn, table, event))
    still = prove(alias, tables, pre_images=pre_images)
    if still:
        raise MoveRefused(
            f"the move's change-capture triggers {', '.join(still)} on {alias} log nothing (a "
            "probe write did not reach the log) and could not be created again: a copy would "
            "miss the changes made while it runs, so nothing is copied. Next: drop them by "
            "hand (the server may list a trigger it cannot drop by name, or keep a name with "
            "no trigger: docs/resharding.md#left-over-triggers), then run the same "
            "movebuckets again to resume, or abort the move (--abort)"
        )
    return failing


def silent(alias: str, tables: Sequence[MovedTable]) -> list[str]:
    """The triggers of ``tables`` on ``alias`` that did not log a probe write (:func:`prove`);
    all of them if the log itself is gone (what they fired on since was not kept)."""
    if not installed(alias):
        return [trigger_name(table.name, suffix) for table in tables for *_, suffix in EVENTS]
    return prove(alias, tables)


def _create(conn: BaseDatabaseWrapper, table: MovedTable, event: tuple[str, str, str]) -> str:
    """The statement that creates ``table``'s trigger for ``event``."""
    if not is_identifier(table.name):
        raise ConfigurationError(f"{table.name!r} is not a valid table name")
    quote = conn.ops.quote_name
    verb, row, suffix = event
    name = trigger_name(table.name, suffix)
    if event in pre.EVENTS:
        action = pre.action(conn, table, row)
    else:
        action = (
            f"INSERT INTO {LOG} (tbl, row_key) "
            f"VALUES ('{table.name}', {row}.{quote(table.log_key())})"
        )
    return dialects.of(conn).trigger(name, verb, quote(table.name), action, IGNORE_MISSING_LOG)


def drop_trigger(cursor: Any, name: str) -> None:
    cursor.execute(f"DROP TRIGGER IF EXISTS {name}")


def remove(alias: str, tables: Sequence[MovedTable]) -> list[str]:
    """Drop the triggers of ``tables`` and the log on ``alias``, and a target's pre-image
    triggers and tables (idempotent; on Galera the tables stay, emptied: :func:`keeps_tables`).
    Returns the triggers the server still lists afterwards (:func:`leftovers`, logged): an
    operator may drop them by hand (docs/resharding.md)."""
    conn = connections[alias]
    with shards.errors_named(alias), conn.cursor() as cursor:
        for table in tables:
            for _event, _row, suffix in (*EVENTS, *pre.EVENTS):
                drop_trigger(cursor, trigger_name(table.name, suffix))
        if not keeps_tables(alias):
            cursor.execute(f"DROP TABLE IF EXISTS {LOG}")
            pre.drop(cursor, tables)
    if keeps_tables(alias):  # emptied, never dropped: see keeps_tables
        _empty_log(alias)
        pre.clear(alias, pre.having(alias, tables), _clear_batch(alias))
    left = leftovers(alias)
    if left:
        logger.warning(
            "%s: the server still lists the move triggers %s after they were dropped (a "
            "trigger whose name it no longer finds); without the log they do nothing (on "
            "Galera, where the log stays, they keep writing it) "
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
    """Whether ``alias`` has a move's change log: the log table (and on Galera, where the
    table stays after a move, :func:`keeps_tables`, a trigger that writes it)."""
    conn = connections[alias]
    with shards.errors_named(alias), conn.cursor() as cursor:
        if LOG not in conn.introspection.table_names(cursor):
            return False
    if not keeps_tables(alias):
        return True
    suffixes = tuple(f"_{suffix}" for *_, suffix in EVENTS)
    return any(name.endswith(suffixes) for name in _writing_triggers(alias, LOG))


def pre_images_kept(alias: str, tables: Sequence[MovedTable]) -> bool:
    """Whether ``alias`` records pre-images of every one of ``tables``: their tables (and on
    Galera, where the tables stay after a move, their triggers)."""
    if not pre.kept(alias, tables):
        return False
    if not keeps_tables(alias):
        return True
    listed = set(_writing_triggers(alias, pre.PREFIX))
    wanted = {trigger_name(t.name, suffix) for t in tables for *_, suffix in pre.EVENTS}
    return wanted <= listed


def keeps_tables(alias: str) -> bool:
    """Whether the tables the triggers write (the log, the pre-images) stay on ``alias`` after
    a move, emptied, instead of being dropped: on Galera. There a ``DROP TABLE`` of a table
    that a trigger wrote in a writer's open transaction can make the cluster discard that
    writer's transaction after its ``COMMIT`` was acknowledged: the nodes fail to apply its
    row events for the dropped table, vote, and drop the write set, on the writer's own node
    too (docs/replicas.md#move-tables-stay-on-galera). Dropping the triggers, and emptying
    their tables, loses nothing."""
    return servers.is_galera(alias)


def _writing_triggers(alias: str, table: str) -> list[str]:
    """The move triggers on ``alias`` whose body writes ``table``."""
    rows = shards.read(
        alias,
        "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE() "
        "AND LEFT(TRIGGER_NAME, %s) = %s AND ACTION_STATEMENT LIKE %s",
        [len(PREFIX), PREFIX, f"%{table}%"],
    )
    return [str(name) for (name,) in rows]


def _empty_log(alias: str) -> None:
    """Delete every entry of a kept log, in batches (a Galera write set each)."""
    conn = connections[alias]
    with shards.errors_named(alias), conn.cursor() as cursor:
        if LOG in conn.introspection.table_names(cursor):
            pre.delete_all(cursor, dialects.of(conn), LOG, "seq", _clear_batch(alias))


def _clear_batch(alias: str) -> int:
    """Rows per statement when a kept table is emptied: under the write-set limit."""
    limit = servers.write_set_limit(alias)
    return min(KEPT_CLEAR_BATCH, limit) if limit else KEPT_CLEAR_BATCH


def read(alias: str, limit: int) -> list[tuple[int, str, bytes]]:
    """The oldest ``limit`` entries ``(seq, table, key)`` still in the log.

    On Galera the read waits until this node has applied what the cluster committed before it
    (``wsrep_sync_wait``): an entry a writer committed through another node just before the
    fence ended its session is read too, by the final replay and by the verification (a node
    applies other nodes' writes a moment after they commit)."""
    sql = f"SELECT seq, tbl, row_key FROM {LOG} ORDER BY seq LIMIT %s"
    if servers.is_galera(alias):
        sql = sessions.applied_first(sql)
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
