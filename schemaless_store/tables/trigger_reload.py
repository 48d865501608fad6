"""Tables whose cached triggers failed to load, found and reloaded (MariaDB).

MariaDB parses a table's triggers when it opens the table into a cached table object. A KILL
that lands while a session parses them (a move's fence, an operator, a ``KILL QUERY`` of the
mover's own trigger DDL) cuts the parse short, and the server keeps the half-parsed list: from
then on every ``INSERT``, ``UPDATE`` and ``DELETE`` of the table fails with "Trigger '...' has
an error in its body" (error 1064, with a piece of the body, or "Unknown trigger ... 'Query
was empty'"), on every session, until the table is opened afresh. The definitions on disk are
whole: ``SHOW TRIGGERS`` lists them as they were created. Reproduced on 10.11 by killing
sessions that create and drop triggers while others write, and every time by a ``SELECT``
whose ``max_statement_time`` ends it during a slow parse
(docs/resharding.md#a-trigger-that-failed-to-load).

Only a move puts triggers on the store's tables, and a move's own DDL and fence are where the
KILLs land. So the mover looks for such a table on the sources and the target, before it goes
on and every five seconds or so while it copies (:func:`repair`): it updates one row of each table
to itself in a transaction it rolls back, with no lock wait (a statement that finds no row,
``WHERE 1 = 0``, never meets the error: the server reports it only as a row is written). A
table that fails it is reopened by an instant ``ALTER`` that sets its comment to what it is:
DDL on a table makes every session open it again, its triggers read from disk. (Creating a
trigger on such a table fails with the same error, and ``FLUSH TABLES`` needs the global
``RELOAD`` privilege; the ``ALTER`` needs only what the mover has on the store's database.)
The ``ALTER`` waits at most two seconds for the table's metadata lock (it would queue every
reader and writer behind a long transaction), three times, then leaves it to the next look. An
empty table has no row to update: a resumed mover reopens each such table whatever it finds
(``always``), and its own trigger DDL (installing, removing) reopens a table too.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django.db import connections, transaction

from ..config.indexes import is_identifier
from ..exceptions import ConfigurationError, MoveRefused
from ..sql import dialects, server_errors
from ..topology import shards
from .moved_rows import MovedTable

logger = logging.getLogger("schemaless_store.moves")

# Reloads of one table before the mover gives up (each one a KILL landing in its parse).
ATTEMPTS = 3
# The reload's ``ALTER`` gives up on the table's metadata lock after this long (it would queue
# every reader and writer of the table behind a long transaction), and is tried again.
LOCK_WAIT = 2
LOCK_TRIES = 3


def state(alias: str, table: MovedTable) -> bool | None:
    """Whether a write to ``table`` on ``alias`` fails on its cached triggers: one row is
    updated to itself and rolled back. None when that tells nothing: the table is empty, or a
    writer holds the row (no lock wait)."""
    conn = connections[alias]
    if not dialects.of(conn).kill_breaks_triggers:
        return False
    if not is_identifier(table.name):
        raise ConfigurationError(f"{table.name!r} is not a valid table name")
    key = conn.ops.quote_name(table.natural_key[0])
    touch = (
        f"SET STATEMENT innodb_lock_wait_timeout = 0 FOR "
        f"UPDATE {conn.ops.quote_name(table.name)} SET {key} = {key} LIMIT 1"
    )
    try:
        with shards.errors_named(alias), transaction.atomic(using=alias):
            with conn.cursor() as cursor:
                cursor.execute(touch)
                found = cursor.rowcount
            transaction.set_rollback(True, using=alias)
    except Exception as exc:
        if server_errors.broken_trigger(exc):
            return True
        if server_errors.code_of(exc) in server_errors.RETRYABLE:
            return None
        raise
    # Rows matched, not changed (Django's MariaDB connection asks for FOUND_ROWS): none
    # means an empty table.
    return False if found else None


def broken(alias: str, table: MovedTable) -> bool:
    """Whether writes to ``table`` on ``alias`` are known to fail on its cached triggers."""
    return state(alias, table) is True


def reload(alias: str, table: str) -> bool:
    """Make every session open ``table`` on ``alias`` afresh, its triggers read from disk: an
    instant ``ALTER`` that sets the table's comment to what it is, waiting at most
    :data:`LOCK_WAIT` seconds for the table's metadata lock, :data:`LOCK_TRIES` times. False
    when a transaction held the lock every time (nothing changed; the next look tries again)."""
    conn = connections[alias]
    if not is_identifier(table):
        raise ConfigurationError(f"{table!r} is not a valid table name")
    with shards.errors_named(alias), conn.cursor() as cursor:
        cursor.execute(
            "SELECT TABLE_COMMENT FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s",
            [table],
        )
        found = cursor.fetchone()
    comment = "" if found is None else found[0]
    statement = (
        f"ALTER TABLE {conn.ops.quote_name(table)} WAIT {LOCK_WAIT} ALGORITHM = INSTANT, "
        "LOCK = NONE, COMMENT = %s"
    )
    for _ in range(LOCK_TRIES):
        try:
            with shards.errors_named(alias), conn.cursor() as cursor:
                cursor.execute(statement, [comment])
            return True
        except Exception as exc:
            if server_errors.code_of(exc) != server_errors.ER_LOCK_WAIT_TIMEOUT:
                raise
    logger.warning(
        "%s: a transaction held %s's metadata lock past %s s, %s times: its triggers are "
        "reloaded at the mover's next look",
        alias,
        table,
        LOCK_WAIT,
        LOCK_TRIES,
    )
    return False


def repair(alias: str, tables: Sequence[MovedTable], *, always: bool = False) -> list[str]:
    """Reload each of ``tables`` on ``alias`` whose cached triggers fail its writes (and, with
    ``always``, each one whose state a write cannot tell: an empty table); returns the tables
    found failing. One still failing after :data:`ATTEMPTS` reloads refuses the move, naming
    the table and the way out."""
    if not dialects.of(connections[alias]).kill_breaks_triggers:
        return []
    repaired = []
    for table in tables:
        found = state(alias, table)
        if found is None and always:
            reload(alias, table.name)  # an empty table: no write can tell
            continue
        reloads = 0
        while found:
            if reloads == ATTEMPTS:
                raise MoveRefused(
                    f'{alias}: every write to {table.name} fails on its triggers ("has an '
                    f'error in its body") after {ATTEMPTS} reloads; run FLUSH TABLES '
                    f"{table.name} on the server, then movebuckets again to resume"
                )
            if not reloads:
                logger.warning(
                    "%s: the server's cached triggers of %s failed to load (a KILL during "
                    "their parse) and fail every write to it; reopening the table",
                    alias,
                    table.name,
                )
                repaired.append(table.name)
            if not reload(alias, table.name):
                break  # a long transaction holds the table: the next look
            reloads += 1
            found = state(alias, table)
    return repaired
