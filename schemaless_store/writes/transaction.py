"""The shard transaction of a write (docs/architecture.md, "The transaction"): Django's
``atomic()``, or, where nothing but the store's own statements run inside, a plain ``BEGIN``
... ``COMMIT`` on the driver's connection. Both commit through the driver's
``Connection.commit()`` (which :mod:`..testing.faults` intercepts)."""

from __future__ import annotations

import contextlib
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper


def shard_transaction(write: Any, conn: BaseDatabaseWrapper) -> Any:
    """The shard transaction: Django's ``atomic()``, or where nothing but the store's own
    statements run inside, a plain ``BEGIN`` ... ``COMMIT`` on MySQL."""
    if not (
        write.quiet
        and conn.vendor == "mysql"
        and not conn.in_atomic_block
        and not conn.queries_logged
    ):
        return transaction.atomic(using=write.alias)
    for change in write.changes:
        for index, _values in change.rows:
            if index.unique:
                # A unique claim may check its holder under atomic() on this very connection.
                return transaction.atomic(using=write.alias)
    return _DriverTransaction(conn)


class _DriverTransaction:
    """``BEGIN`` ... ``COMMIT`` on the driver's connection: what ``atomic()`` does for a
    transaction of the store's own statements, without its two extra round trips (``SET
    autocommit=0``, then ``=1``). The statements inside run on the driver's cursor too
    (:class:`~schemaless_store.topology.shards.statement_cursor`); Django's view of the connection
    (autocommit on, no atomic block) stays true once the block ends."""

    def __init__(self, conn: BaseDatabaseWrapper) -> None:
        self.conn = conn

    def __enter__(self) -> None:
        conn = self.conn
        conn.validate_thread_sharing()
        conn.ensure_connection()
        with conn.wrap_database_errors:
            conn.connection.begin()

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        driver = self.conn.connection
        if exc_type is not None:
            with contextlib.suppress(Exception):
                driver.rollback()
            return
        with self.conn.wrap_database_errors:
            driver.commit()
