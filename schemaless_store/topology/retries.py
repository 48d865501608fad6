"""Running a transaction again after a deadlock or a lock wait timeout (MariaDB errors
1213 and 1205, SQLite's "database is locked"), a bounded number of times
(``SCHEMALESS["WRITE_RETRIES"]``), with how many retries this process made (docs/usage.md).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import OperationalError

from ..config import conf
from ..sql.server_errors import RETRYABLE, code_of
from . import shards

T = TypeVar("T")
logger = logging.getLogger(__name__)


def is_retryable(exc: BaseException) -> bool:
    if not isinstance(exc, OperationalError):
        return False
    if code_of(exc) in RETRYABLE:
        return True
    return "database is locked" in str(exc)


_retries = 0
_retries_lock = threading.Lock()


def retries_made() -> int:
    """How many times this process retried an operation after a deadlock or lock wait timeout."""
    return _retries


def with_retries(operation: Callable[[], T], alias: str | None = None) -> T:
    """Run ``operation`` again after a deadlock or lock wait timeout, a bounded number of times
    (``SCHEMALESS["WRITE_RETRIES"]``).

    ``operation`` must be a whole transaction of its own. When the caller already has a
    transaction open on ``alias`` (``transaction.atomic``), it runs once: a deadlock rolled back
    the caller's whole transaction, so only the caller can retry it.
    """
    global _retries
    attempts = conf.get().write_retries
    if alias is not None and shards.connection(alias).in_atomic_block:
        attempts = 0
    for attempt in range(attempts + 1):
        try:
            return operation()
        except OperationalError as exc:
            if attempt == attempts or not is_retryable(exc):
                raise
            with _retries_lock:
                _retries += 1
            logger.info("retrying after %s (attempt %d of %d)", exc, attempt + 1, attempts)
            # Exponential, with jitter: writers that deadlocked each other must not come
            # back at the same moment and deadlock again.
            time.sleep(0.005 * (2**attempt) * random.uniform(0.5, 1.5))
    raise AssertionError("unreachable")
