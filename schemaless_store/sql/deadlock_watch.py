"""Deadlocks that a write watches for on its shard's connection (:mod:`..writes.swallowed`).

MariaDB rolls the whole transaction back on a deadlock (error 1213; on Galera also when
another node's write aborts it), and code the write runs, a signal receiver, may catch the
error and go on. A watch must see every such error on the connection, caught or not: the
store's own statements on the driver's route report theirs here (``topology/shards.py``:
reads and ``statement_cursor``), and Django's cursors reach the watch through Django's
``execute_wrapper``. Only a statement sent on the driver connection by hand
(``connection.connection.cursor()``) is not seen.
"""

from __future__ import annotations

from typing import Any, Protocol

from .server_errors import ER_LOCK_DEADLOCK, code_of

WATCHES = "_schemaless_deadlock_watches"  # on Django's connection wrapper: the open watches


class Watch(Protocol):
    def saw(self, exc: BaseException) -> None: ...


def note(conn: Any, exc: BaseException | None) -> None:
    """Tell ``conn``'s open watches of ``exc``, if it is a deadlock (an error path only)."""
    watches = conn.__dict__.get(WATCHES)
    if watches and exc is not None and code_of(exc) == ER_LOCK_DEADLOCK:
        for watch in watches:
            watch.saw(exc)


def add(conn: Any, watch: Watch) -> None:
    conn.__dict__.setdefault(WATCHES, []).append(watch)


def remove(conn: Any, watch: Watch) -> None:
    conn.__dict__[WATCHES].remove(watch)
