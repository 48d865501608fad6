"""A server's client sessions: this session's round trip, variables and settings (Galera's,
a consistent snapshot, its database), and the others in ``information_schema.PROCESSLIST``,
for the fence's kill of the connections that may still believe a withdrawn bucket is served
(:mod:`..guards.fence`; docs/design.md#the-fence).

A user sees its own sessions without any privilege; another user's need ``PROCESS`` to be seen
and ``CONNECTION ADMIN`` (or ``SUPER``) to be killed. The fence ends every session on the
shard's database, whatever its user, so the mover's user needs both (:data:`FENCE_GRANTS`).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable
from typing import Any

from django.db import DatabaseError

from .server_errors import CONNECTION_LOST, ER_NO_SUCH_THREAD, code_of

# CLIENT_MULTI_STATEMENTS, a connection flag; MYSQL_OPTION_MULTI_STATEMENTS_ON of
# mysql_set_server_option() (MySQLdb's constants, without importing the driver here).
CLIENT_MULTI_STATEMENTS = 1 << 16
MULTI_STATEMENTS_ON = 0
_MANY = "_schemaless_many_statements"  # set on a driver connection switched on here
# Set by the Galera backend on a driver connection: ``(host, port)`` of the node it reached
# (where its session runs: a lost answer's session is ended there,
# :func:`..guards.fence.end_session`).
NODE = "_schemaless_node"


def allow_many_statements(driver: Any) -> None:
    """Let the driver connection ``driver`` (mysqlclient's) send several statements in one
    query. mysqlclient opens its connections with ``CLIENT_MULTI_STATEMENTS``, and then nothing
    is sent; one opened without it (``OPTIONS={"multi_statements": False}``) is switched on
    once (``mysql_set_server_option()``, one round trip per connection)."""
    if driver.client_flag & CLIENT_MULTI_STATEMENTS or getattr(driver, _MANY, False):
        return
    driver.set_server_option(MULTI_STATEMENTS_ON)
    setattr(driver, _MANY, True)


def whoami(cursor: Any) -> tuple[str, int]:
    """``(user name, this session's id)``: the name as the process list shows it (no host)."""
    cursor.execute("SELECT SUBSTRING_INDEX(USER(), '@', 1), CONNECTION_ID()")
    user, own = cursor.fetchone()
    return str(user), int(own)


def where(cursor: Any) -> tuple[Any, ...]:
    """``(hostname, port, session id)``: which server and session a connection is."""
    cursor.execute("SELECT @@hostname, @@port, CONNECTION_ID()")
    return tuple(cursor.fetchone())


def ping(cursor: Any) -> None:
    """A trivial round trip (``SELECT 1``): how busy the server is, for the throttle."""
    cursor.execute("SELECT 1")
    cursor.fetchall()


def galera_settings(cursor: Any) -> tuple[Any, Any]:
    """``(@@wsrep_on, @@wsrep_max_ws_rows)``; ``DatabaseError`` on a server that is no Galera
    build (no such variables)."""
    cursor.execute("SELECT @@wsrep_on, @@wsrep_max_ws_rows")
    on, rows = cursor.fetchone()
    return on, rows


def galera_ready(cursor: Any) -> str | None:
    """The node's ``wsrep_ready`` status (``"ON"`` once it is synced with its cluster), or
    None where the server has no such status."""
    cursor.execute("SHOW STATUS LIKE 'wsrep_ready'")
    row = cursor.fetchone()
    return None if row is None else str(row[1])


def lock_wait(cursor: Any) -> float:
    """The session's ``innodb_lock_wait_timeout``, seconds (its ``init_command`` applied)."""
    cursor.execute("SELECT @@SESSION.innodb_lock_wait_timeout")
    return float(cursor.fetchone()[0])


def begin_snapshot(cursor: Any) -> None:
    """Start a read-only ``REPEATABLE READ`` transaction ``WITH CONSISTENT SNAPSHOT`` (as
    ``mysqldump --single-transaction`` takes): its reads see the database as of one instant."""
    cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")


def leave_database(cursor: Any) -> None:
    """Make ``information_schema`` the session's database: a connection that holds a server
    lock leaves the shard's, so a move's fence, which ends the store's sessions there, passes
    it by."""
    cursor.execute("USE information_schema")


def apply_first(cursor: Any) -> None:
    """Galera: this session's reads wait until the node has applied what the cluster
    committed before them (``wsrep_sync_wait``). Only for a connection of the store's own:
    on one it shares with the application, use :func:`applied_first`."""
    cursor.execute("SET SESSION wsrep_sync_wait = 1")


def applied_first(sql: str) -> str:
    """Galera: ``sql`` waiting until the node has applied what the cluster committed before
    it, for this statement alone: the session's own ``wsrep_sync_wait`` (which a deployment
    may set in its ``init_command``) is left as it was."""
    return f"SET STATEMENT wsrep_sync_wait = 1 FOR {sql}"


# The server's own threads (a Galera applier, the event scheduler, replication), which may show
# the database they work on: never a client's session, never ended.
_SERVER_USERS = ("system user", "event_scheduler")
_SERVER_COMMANDS = ("Daemon", "Binlog Dump", "Slave_IO", "Slave_SQL", "Slave_worker")
# What seeing and ending every session needs: each entry one privilege of the alternatives.
FENCE_GRANTS = (("PROCESS",), ("CONNECTION ADMIN", "SUPER"))
_GLOBAL_GRANT = re.compile(r"^GRANT (.+?) ON \*\.\* TO ")


def others(cursor: Any, database: str, user: str | None = None) -> list[int]:
    """The ids of the other client sessions whose current database is ``database`` (of
    ``user`` only, if given), whatever user opened them: those this session can see."""
    users = ", ".join(["%s"] * len(_SERVER_USERS))
    commands = ", ".join(["%s"] * len(_SERVER_COMMANDS))
    cursor.execute(
        "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = %s AND ID <> CONNECTION_ID() "
        f"AND USER NOT IN ({users}) AND COMMAND NOT IN ({commands})"
        + (" AND USER = %s" if user is not None else ""),
        [database, *_SERVER_USERS, *_SERVER_COMMANDS, *([user] if user is not None else [])],
    )
    return [int(row[0]) for row in cursor.fetchall()]


def writing_elsewhere(cursor: Any, database: str) -> list[int]:
    """The ids of the other client sessions whose current database is not ``database`` (or
    none) and whose transaction holds uncommitted changes or locks (``INNODB_TRX``): such a
    session may have written ``database``'s tables by their qualified names, and its commit
    must not come after a fence. One that has written nothing (a lock connection, a reader)
    is not listed. Needs ``PROCESS``, as the process list does."""
    users = ", ".join(["%s"] * len(_SERVER_USERS))
    commands = ", ".join(["%s"] * len(_SERVER_COMMANDS))
    cursor.execute(
        "SELECT DISTINCT p.ID FROM information_schema.PROCESSLIST p "
        "JOIN information_schema.INNODB_TRX t ON t.trx_mysql_thread_id = p.ID "
        "WHERE (p.DB IS NULL OR p.DB <> %s) AND p.ID <> CONNECTION_ID() "
        f"AND p.USER NOT IN ({users}) AND p.COMMAND NOT IN ({commands}) "
        "AND (t.trx_rows_modified > 0 OR t.trx_rows_locked > 0 OR t.trx_tables_locked > 0)",
        [database, *_SERVER_USERS, *_SERVER_COMMANDS],
    )
    return [int(row[0]) for row in cursor.fetchall()]


def missing_fence_grants(cursor: Any) -> list[str]:
    """Which of :data:`FENCE_GRANTS` this session's user lacks (with its default role's),
    as ``SHOW GRANTS`` lists the global privileges: ``["PROCESS", "CONNECTION ADMIN or
    SUPER"]`` at most."""
    cursor.execute("SHOW GRANTS")
    held: set[str] = set()
    for (line,) in cursor.fetchall():
        found = _GLOBAL_GRANT.match(str(line))
        if found:
            held.update(p.strip().upper() for p in found.group(1).split(","))
    if "ALL PRIVILEGES" in held:
        return []
    return [" or ".join(options) for options in FENCE_GRANTS if not held & set(options)]


def galera_addresses(cursor: Any) -> list[str]:
    """The members' client addresses (``wsrep_incoming_addresses``: ``host:port`` each, as
    the nodes report them; ``AUTO`` or empty where a node does not know its own)."""
    cursor.execute("SHOW STATUS LIKE 'wsrep_incoming_addresses'")
    row = cursor.fetchone()
    if row is None or not row[1]:
        return []
    return [address.strip() for address in str(row[1]).split(",") if address.strip()]


def kill(cursor: Any, ids: Iterable[int]) -> None:
    """End these sessions: an open transaction of theirs is rolled back and cannot commit."""
    for number in ids:
        try:
            cursor.execute(f"KILL CONNECTION {int(number)}")
        except DatabaseError as exc:
            if code_of(exc) != ER_NO_SUCH_THREAD:
                raise


def alive(cursor: Any, ids: Iterable[int]) -> set[int]:
    """Which of ``ids`` are still sessions of the server (a killed one stays until its
    rollback is done)."""
    wanted = sorted({int(n) for n in ids})
    if not wanted:
        return set()
    cursor.execute(
        "SELECT ID FROM information_schema.PROCESSLIST "
        f"WHERE ID IN ({', '.join(str(n) for n in wanted)})"
    )
    return {int(row[0]) for row in cursor.fetchall()}


def galera_members(cursor: Any) -> int | None:
    """The size of the Galera cluster's primary component this node is in (None: not Galera)."""
    with contextlib.suppress(DatabaseError):
        cursor.execute("SHOW STATUS LIKE 'wsrep_cluster_size'")
        row = cursor.fetchone()
        cursor.execute("SELECT @@wsrep_on")
        on = cursor.fetchone()
        if row is not None and on is not None and str(on[0]).upper() in ("1", "ON"):
            return int(row[1])
    return None


def read_to_the_end(driver: Any) -> bool:
    """Read the answers a query left unread on the driver connection ``driver`` (after an
    interrupt between its round trip and its answers); False if that failed on the client's
    side, and the session is out of step (its owner closes it)."""
    try:
        try:
            driver.store_result()  # the current answer, if it was not read yet
        except driver.Error as exc:
            # Out of sync: it was read already (the interrupt came after). A connection
            # lost while reading it leaves nothing to read.
            if code_of(exc) in CONNECTION_LOST:
                return False
        while driver.next_result() == 0:
            driver.store_result()
    except driver.Error as exc:
        # A statement's error ends the answers (the server sent none after it); a client
        # error (2000-2999: out of sync, gone) leaves the session unusable.
        code = code_of(exc)
        return not 2000 <= (2000 if code is None else code) < 3000
    except BaseException:
        return False  # interrupted again
    return True
