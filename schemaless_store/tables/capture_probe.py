"""The proof that a move's change-capture triggers log what they must (:mod:`.move_log`).

A trigger's name says nothing: ``CREATE TRIGGER IF NOT EXISTS`` passes over a name that is
taken, whatever is behind it (a trigger of an older store, one half dropped, or on MariaDB a
``.TRN`` name file whose trigger is gone), and a table whose trigger logs nothing has its
changes missed by the copy. So each trigger is judged by what it does: in one transaction,
rolled back, a row of the table is updated, deleted and inserted again (an empty table: a row
of the same table on another shard is inserted, updated and deleted), and each statement must
add an entry for the row's key to the log. Nothing of it stays: the rows and the log entries
go with the rollback (an auto-increment counter of the log may move on).

A table that is empty on every shard has no row to probe with: its triggers are judged by the
definition the server lists (their table, their event and a body that writes the log).
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
from collections.abc import Sequence
from typing import Any

from django.db import OperationalError, connections, transaction

from ..sql import dialects
from ..sql.values import plain_row
from ..topology import retries, shards
from ..topology.write_lock import write_lock
from . import pre_images as pre
from .moved_rows import MovedTable

logger = logging.getLogger("schemaless_store.moves")

LOG = "schemaless_move_log"
PREFIX = "schemaless_mv_"
EVENTS = (("INSERT", "NEW", "i"), ("UPDATE", "NEW", "u"), ("DELETE", "OLD", "d"))


def trigger_name(table: str, suffix: str) -> str:
    digest = hashlib.blake2b(table.encode(), digest_size=6).hexdigest()
    return f"{PREFIX}{digest}_{suffix}"


# Probes of one table that a writer spoiled (took its sampled row away, or aborted it in a
# deadlock), before its triggers are judged by their definitions instead.
PROBES = 5


class _Moved(Exception):
    """The probe's row was gone when it was updated or deleted (a writer deleted it or
    changed its key after it was sampled): the statement logged nothing, whatever its trigger
    does, so the probe says nothing of it. Or writers held every row of the table: there was
    none to probe with."""


def prove(alias: str, tables: Sequence[MovedTable], *, pre_images: bool = False) -> list[str]:
    """The triggers of ``tables`` on ``alias`` that did not log a probe write (none: every
    one logs). Each table is probed in a transaction of its own, rolled back; a probe whose
    row a writer took away meanwhile, or that a deadlock with a writer aborted, is made again
    (at most :data:`PROBES` times; then the triggers' definitions judge them).

    ``pre_images``: the target's triggers (:mod:`.pre_images`), each of which must record the
    row as it was before its statement (``OLD.*``, or the inserted row marked absent); the
    probe's row's entry is deleted before each statement (in the same rolled-back
    transaction), so each statement's trigger is judged on its own."""
    failing: list[str] = []
    for table in tables:
        for attempt in range(PROBES):
            try:
                with write_lock(), transaction.atomic(using=alias):
                    found = _probe(alias, table, pre_images)
                    transaction.set_rollback(True, using=alias)
            except (_Moved, OperationalError) as exc:  # or a deadlock with a writer (Galera:
                if isinstance(exc, OperationalError) and not retries.is_retryable(exc):
                    raise  # one through another node): rolled back either way, probe again
                time.sleep(random.uniform(0, 0.02 * (attempt + 1)))
                continue
            failing += found
            break
        else:  # writers keep spoiling the probes: judge by the definitions
            logger.warning(
                "%s: writers spoiled %d probe writes of %s's move triggers in a row; they are "
                "judged by their definitions instead",
                alias,
                PROBES,
                table.name,
            )
            failing += _unlisted(alias, table, pre_images)
    return failing


def _probe(alias: str, table: MovedTable, pre_images: bool) -> list[str]:
    conn = connections[alias]
    quote = conn.ops.quote_name
    with conn.cursor() as cursor:
        described = conn.introspection.get_table_description(cursor, table.name)
    # The auto-increment key (added_id, added_at) is left to the server.
    auto = set(table.walk_key) - set(table.natural_key)
    names = [column.name for column in described if column.name not in auto]
    sample, here = _sample(alias, table, names)
    if sample is None:
        return _unlisted(alias, table, pre_images)
    same = dialects.of(conn).null_safe_equal
    where = " AND ".join(f"{quote(c)} {same} %s" for c in table.natural_key)
    keys = [sample[names.index(c)] for c in table.natural_key]
    first = quote(table.natural_key[0])
    name = quote(table.name)
    insert = (
        f"INSERT INTO {name} ({', '.join(quote(c) for c in names)}) "
        f"VALUES ({', '.join(['%s'] * len(names))})"
    )
    statements = {
        "u": (f"UPDATE {name} SET {first} = {first} WHERE {where}", keys),
        "d": (f"DELETE FROM {name} WHERE {where}", keys),
        "i": (insert, list(sample)),
    }
    order = ("u", "d", "i") if here else ("i", "u", "d")
    logged = sample[names.index(table.log_key())]
    recorded = plain_row([sample[names.index(c)] for c in table.columns])
    pre_table = pre.table_name(table.name)
    failing = []
    with conn.cursor() as cursor:
        for suffix in order:
            if pre_images:  # an earlier statement's entry, or an owner's (rolled back)
                cursor.execute(f"DELETE FROM {pre_table} WHERE {where}", keys)
            else:
                since = _last_entry(cursor)
            cursor.execute(*statements[suffix])
            if suffix != "i" and cursor.rowcount == 0:
                raise _Moved  # nothing matched: nothing to log
            if not pre_images:
                if not _entries(cursor, table.name, logged, since):
                    failing.append(trigger_name(table.name, suffix))
                continue
            cursor.execute(
                f"SELECT present, {', '.join(quote(c) for c in table.columns)} "
                f"FROM {pre_table} WHERE {where}",
                keys,
            )
            entry = cursor.fetchone()
            if entry is None or (bool(entry[0]), plain_row(entry[1:])) != (suffix != "i", recorded):
                failing.append(trigger_name(table.name, "p" + suffix))
    return failing


def _sample(alias: str, table: MovedTable, names: list[str]) -> tuple[Any, bool]:
    """A row of ``table`` (its ``names`` columns) on ``alias``, and True; or one on another
    shard of the same kind of server, and False; or (None, False).

    The row on ``alias`` is read locked, in the probe's transaction: a writer that changed it
    between this read and the probe's statements would make its triggers record the newer
    row, which the probe would take for a trigger that records the wrong one (it refused a
    move on a busy table). A writer waits for the rollback, a few milliseconds; on Galera a
    writer through another node aborts the probe instead (a deadlock error, as a conflict
    with its statements would). A row another transaction holds is passed over (``SKIP
    LOCKED``): the probe never waits for a writer, which a flip would make writers wait for;
    when writers hold every row, the probe is made again a moment later (:class:`_Moved`),
    not with another shard's row, which could collide with a held one's key."""
    dialect = dialects.of(connections[alias])
    others = [
        a for a in shards.shard_aliases() if a != alias and dialects.of(connections[a]) is dialect
    ]
    for where in (alias, *others):
        conn = connections[where]
        quote = conn.ops.quote_name
        lock = dialect.for_update_skip_locked if where == alias else ""
        with conn.cursor() as cursor:
            cursor.execute(
                f"SELECT {', '.join(quote(c) for c in names)} FROM {quote(table.name)} "
                f"LIMIT 1{lock}"
            )
            row = cursor.fetchone()
        if row is not None:
            return tuple(row), where == alias
        if lock and _any_row(conn, table):  # every row is held: not an empty table
            raise _Moved  # probed again, a moment later (another shard's row could collide)
    return None, False


def _any_row(conn: Any, table: MovedTable) -> bool:
    with conn.cursor() as cursor:
        cursor.execute(f"SELECT 1 FROM {conn.ops.quote_name(table.name)} LIMIT 1")
        return cursor.fetchone() is not None


def _last_entry(cursor: Any) -> int:
    """The log's last ``seq`` (its primary key's end: no scan)."""
    cursor.execute(f"SELECT COALESCE(MAX(seq), 0) FROM {LOG}")
    return int(cursor.fetchone()[0])


def _entries(cursor: Any, table: str, key: Any, since: int) -> int:
    """Entries for ``key`` of ``table`` logged after ``since``: a range of the primary key, not
    a scan of a log that may hold a long move's changes."""
    cursor.execute(
        f"SELECT COUNT(*) FROM {LOG} WHERE seq > %s AND tbl = %s AND row_key = %s",
        [since, table, key],
    )
    return int(cursor.fetchone()[0])


def _unlisted(alias: str, table: MovedTable, pre_images: bool = False) -> list[str]:
    """Of ``table``'s triggers, those the server does not list on it, for their event, with a
    body that writes the log, or the table's pre-images (a table with no row to probe with)."""
    conn = connections[alias]
    events = pre.EVENTS if pre_images else EVENTS
    wanted = {trigger_name(table.name, suffix): verb for verb, _row, suffix in events}
    writes = pre.table_name(table.name) if pre_images else LOG
    with conn.cursor() as cursor:
        if dialects.of(conn).information_schema:
            cursor.execute(
                "SELECT TRIGGER_NAME, EVENT_MANIPULATION FROM information_schema.TRIGGERS "
                "WHERE TRIGGER_SCHEMA = DATABASE() AND EVENT_OBJECT_TABLE = %s "
                "AND ACTION_TIMING = 'AFTER' AND ACTION_STATEMENT LIKE %s",
                [table.name, f"%{writes}%"],
            )
            listed = {(str(n), str(e).upper()) for n, e in cursor.fetchall()}
        else:
            cursor.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = %s",
                [table.name],
            )
            listed = {
                (str(n), verb)
                for n, sql in cursor.fetchall()
                for verb in wanted.values()
                if f"AFTER {verb}" in str(sql).upper() and writes in str(sql)
            }
    return [name for name, verb in wanted.items() if (name, verb) not in listed]
