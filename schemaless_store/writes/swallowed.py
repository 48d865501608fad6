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
:func:`check`, before the receipt, raises it again: the transaction is rolled back and
the write runs again, as after any deadlock (``SCHEMALESS["WRITE_RETRIES"]``).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from django.db import OperationalError

from ..sql.deadlock_watch import Watch
from ..sql.server_errors import ER_LOCK_DEADLOCK

logger = logging.getLogger("schemaless_store.writes")


def check(watch: Watch, alias: str) -> None:
    """Raise, as a deadlock, one that something inside the write caught."""
    if watch.error is None:
        return
    logger.warning(
        "%s: a deadlock (%s) was caught inside a write's transaction, by a signal "
        "receiver or other code the write ran; the server had rolled the transaction "
        "back, so the write runs again. Let database errors inside a save or a delete "
        "propagate",
        alias,
        watch.error,
    )
    raise OperationalError(
        ER_LOCK_DEADLOCK,
        f"a deadlock caught inside the write's transaction rolled it back ({watch.error})",
    ) from watch.error


# A quiet write's: nothing to watch, and little to pay on the hot path (no generator).
_QUIET = contextlib.nullcontext()


def watched(conn: Any, quiet: bool) -> Any:
    """A context manager: a :class:`Watch` on ``conn`` while the block runs, or none (``as``
    gives None) for a ``quiet`` write (nothing but the store's own statements runs inside
    it, and those raise)."""
    return _QUIET if quiet else Watch(conn)
