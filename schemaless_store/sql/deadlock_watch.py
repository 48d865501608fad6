"""Deadlocks that a write watches for on its shard's connection (:mod:`..writes.swallowed`).

MariaDB rolls the whole transaction back on a deadlock (error 1213; on Galera also when
another node's write aborts it), and code the write runs, a signal receiver, may catch the
error and go on. A :class:`Watch` sees every such error on the connection, caught or not:
Django's cursors reach it as Django's ``execute_wrapper``, and the store's own statements on
the driver's route report theirs through :func:`note` (``topology/shards.py``: reads and
``statement_cursor``). Only a statement sent on the driver connection by hand
(``connection.connection.cursor()``) is not seen.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import DatabaseError

from .server_errors import ER_LOCK_DEADLOCK, code_of

WATCHES = "_schemaless_deadlock_watches"  # on Django's connection wrapper: the open watches


class Watch:
    """The first deadlock any statement on ``conn`` met while the ``with`` block ran."""

    __slots__ = ("conn", "error")

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.error: BaseException | None = None

    def saw(self, exc: BaseException) -> None:
        if self.error is None and code_of(exc) == ER_LOCK_DEADLOCK:
            self.error = exc

    def __call__(
        self, execute: Callable[..., Any], sql: Any, params: Any, many: bool, context: Any
    ) -> Any:
        try:
            return execute(sql, params, many, context)
        except DatabaseError as exc:
            self.saw(exc)
            raise

    def __enter__(self) -> Watch:
        self.conn.execute_wrappers.append(self)
        self.conn.__dict__.setdefault(WATCHES, []).append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.__dict__[WATCHES].remove(self)
        self.conn.execute_wrappers.remove(self)


def note(conn: Any, exc: BaseException | None) -> None:
    """Tell ``conn``'s open watches of ``exc`` (an error path only)."""
    if exc is not None:
        for watch in conn.__dict__.get(WATCHES, ()):
            watch.saw(exc)
