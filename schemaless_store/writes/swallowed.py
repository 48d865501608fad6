"""A deadlock that rolled the write's transaction back, caught inside it by code the write runs
(a ``pre_save``/``post_save`` receiver, or ``pre_delete``/``post_delete``).

MariaDB rolls the **whole** transaction back on a deadlock (error 1213; on Galera also when
another node's write aborts it, even while it is idle), and says so only to the statement that
met it. A receiver that catches that error and goes on leaves the write's later statements in a
new transaction of their own: its receipt, then the ``COMMIT``, commit without the write's rows,
so the write would be acknowledged, a recall would find its receipt, and its change would be
gone. While a write's receivers can run (a write that is not ``quiet``), :func:`watched` notes
such an error on the shard's connection (Django's cursors through ``execute_wrapper``, the
store's own statements on the driver's route through :mod:`..sql.deadlock_watch`), and
:meth:`Watch.check`, before the receipt, raises it again: the transaction is rolled back and
the write runs again, as after any deadlock (``SCHEMALESS["WRITE_RETRIES"]``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

from django.db import DatabaseError, OperationalError

from ..sql import deadlock_watch
from ..sql.server_errors import ER_LOCK_DEADLOCK, code_of

logger = logging.getLogger("schemaless_store.writes")


class Watch:
    """The first deadlock any statement on the connection met, raised or not: the store's own
    on the driver's route tell it (:mod:`..sql.deadlock_watch`), Django's cursors through
    Django's ``execute_wrapper`` (this object's ``__call__``)."""

    __slots__ = ("error",)

    def __init__(self) -> None:
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

    def check(self, alias: str) -> None:
        """Raise, as a deadlock, one that something inside the write caught."""
        if self.error is None:
            return
        logger.warning(
            "%s: a deadlock (%s) was caught inside a write's transaction, by a signal "
            "receiver or other code the write ran; the server had rolled the transaction "
            "back, so the write runs again. Let database errors inside a save or a delete "
            "propagate",
            alias,
            self.error,
        )
        raise OperationalError(
            ER_LOCK_DEADLOCK,
            f"a deadlock caught inside the write's transaction rolled it back ({self.error})",
        ) from self.error


# A quiet write's: nothing to watch, and little to pay on the hot path (no generator).
_QUIET = contextlib.nullcontext()


class _Watching:
    """A :class:`Watch` on ``conn`` while the ``with`` block runs."""

    __slots__ = ("conn", "watch")

    def __init__(self, conn: Any) -> None:
        self.conn, self.watch = conn, Watch()

    def __enter__(self) -> Watch:
        self.conn.execute_wrappers.append(self.watch)
        deadlock_watch.add(self.conn, self.watch)
        return self.watch

    def __exit__(self, *exc: object) -> None:
        deadlock_watch.remove(self.conn, self.watch)
        self.conn.execute_wrappers.remove(self.watch)


def watched(conn: Any, quiet: bool) -> Any:
    """A context manager: a :class:`Watch` on ``conn`` while the block runs, or none (``as``
    gives None) for a ``quiet`` write (nothing but the store's own statements runs inside
    it, and those raise)."""
    return _QUIET if quiet else _Watching(conn)
