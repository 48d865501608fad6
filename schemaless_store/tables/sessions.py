"""The server's client sessions (``information_schema.PROCESSLIST``), for the fence's kill of
the connections that may still believe a withdrawn bucket is served (:mod:`..fence`;
docs/design.md#the-fence).

A user sees its own sessions without any privilege; another user's need ``PROCESS`` to be seen
and ``CONNECTION ADMIN`` (or ``SUPER``) to be killed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

from django.db import DatabaseError

# KILL of a session that ended meanwhile: "Unknown thread id".
ER_NO_SUCH_THREAD = 1094


def whoami(cursor: Any) -> tuple[str, int]:
    """``(user name, this session's id)``: the name as the process list shows it (no host)."""
    cursor.execute("SELECT SUBSTRING_INDEX(USER(), '@', 1), CONNECTION_ID()")
    user, own = cursor.fetchone()
    return str(user), int(own)


def where(cursor: Any) -> tuple[Any, ...]:
    """``(hostname, port, session id)``: which server and session a connection is."""
    cursor.execute("SELECT @@hostname, @@port, CONNECTION_ID()")
    return tuple(cursor.fetchone())


def apply_first(cursor: Any) -> None:
    """Galera: this session's reads wait until the node has applied what the cluster
    committed before them (``wsrep_sync_wait``)."""
    cursor.execute("SET SESSION wsrep_sync_wait = 1")


def others(cursor: Any, user: str, database: str) -> list[int]:
    """The ids of the other sessions of ``user`` whose current database is ``database``."""
    cursor.execute(
        "SELECT ID FROM information_schema.PROCESSLIST "
        "WHERE USER = %s AND DB = %s AND ID <> CONNECTION_ID()",
        [user, database],
    )
    return [int(row[0]) for row in cursor.fetchall()]


def kill(cursor: Any, ids: Iterable[int]) -> None:
    """End these sessions: an open transaction of theirs is rolled back and cannot commit."""
    for number in ids:
        try:
            cursor.execute(f"KILL CONNECTION {int(number)}")
        except DatabaseError as exc:
            if not (exc.args and exc.args[0] == ER_NO_SUCH_THREAD):
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
