"""The shard transaction of a write (docs/architecture.md, "The transaction"): Django's
``atomic()``, or, where nothing but the store's own statements run inside, a plain ``BEGIN``
... ``COMMIT`` on the driver's connection. They commit through the driver's
``Connection.commit()``, or, with a write's receipt, :func:`..tables.receipts.record_and_commit`
(both of which :mod:`..testing.faults` intercepts)."""

from __future__ import annotations

import contextlib
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from ..tables import receipts as receipt_table


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
        self.receipt: tuple[bytes, int, dict[str, int]] | None = None

    def __enter__(self) -> _DriverTransaction:
        conn = self.conn
        conn.validate_thread_sharing()
        conn.ensure_connection()
        with conn.wrap_database_errors:
            conn.connection.begin()
        return self

    def defer_receipt(self, write_id: bytes, created: int, result: dict[str, int]) -> None:
        """Send the write's receipt with the ``COMMIT``, in its round trip."""
        self.receipt = (write_id, created, result)

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        driver = self.conn.connection
        if exc_type is not None:
            with contextlib.suppress(Exception):
                driver.rollback()
            return
        with self.conn.wrap_database_errors:
            if self.receipt is None:
                driver.commit()
                return
            try:
                receipt_table.record_and_commit(driver, *self.receipt)
            except Exception:
                with contextlib.suppress(Exception):
                    driver.rollback()  # a failed INSERT left the transaction open
                raise
