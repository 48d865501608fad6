"""The shard transaction of a write (docs/architecture.md, "The transaction"): Django's
``atomic()``, or, where nothing but the store's own statements run inside, a plain ``BEGIN``
... ``COMMIT`` on the driver's connection. They commit through the driver's
``Connection.commit()``, or, with a write's receipt or statements sent with the ``COMMIT``,
:func:`..tables.receipts.commit_batch` (both of which :mod:`..testing.faults` intercepts)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from ..exceptions import ShardUnavailable
from ..sql import dialects, literals, sessions
from ..tables import receipts as receipt_table
from ..topology import retries, servers, shards
from ..topology.write_lock import write_lock

T = TypeVar("T")

# Tries on a fresh connection after a write lost its own (a move's fence, a failover).
LOST_ATTEMPTS = 3


def shard_transaction(write: Any, conn: BaseDatabaseWrapper) -> Any:
    """The shard transaction: Django's ``atomic()``, or where nothing but the store's own
    statements run inside, a plain ``BEGIN`` ... ``COMMIT`` on MariaDB (not on Galera)."""
    if not (
        write.quiet
        and dialects.of(conn).driver_route
        and not conn.in_atomic_block
        and not conn.queries_logged
    ):
        return transaction.atomic(using=write.alias)
    if servers.is_galera(write.alias):
        # A COMMIT inside a multi-statement query on a Galera node may answer success for a
        # transaction certification or a brute-force abort rolled back, the query's later
        # statements then running outside it (acknowledged writes lost, rows written over
        # without their lock: tests/replicas/test_galera.py). There the COMMIT goes alone.
        return transaction.atomic(using=write.alias)
    for change in write.changes:
        for index, _values in change.rows:
            if index.unique:
                # A unique claim may check its holder under atomic() on this very connection.
                return transaction.atomic(using=write.alias)
    return _DriverTransaction(conn)


def own_transaction(alias: str, conn: BaseDatabaseWrapper) -> Any:
    """A transaction of the store's own statements on ``alias`` that no write's signals or
    claims enter (step 5's re-check): the driver's ``BEGIN`` ... ``COMMIT`` on MariaDB, outside
    a caller's transaction and with Django not recording queries; else ``atomic()``."""
    if dialects.of(conn).driver_route and not conn.in_atomic_block and not conn.queries_logged:
        return _DriverTransaction(conn)
    return transaction.atomic(using=alias)


class _DriverTransaction:
    """``BEGIN`` ... ``COMMIT`` on the driver's connection: what ``atomic()`` does for a
    transaction of the store's own statements, without its two extra round trips (``SET
    autocommit=0``, then ``=1``). The statements inside run on the driver's cursor too
    (:class:`~schemaless_store.topology.shards.statement_cursor`); Django's view of the connection
    (autocommit on, no atomic block) stays true once the block ends.

    Nothing is sent on entering: ``BEGIN`` travels with the transaction's first statement
    (:meth:`opening`: the protocol's locking read), or is sent alone (:meth:`begin`) before a
    statement not told to carry it. Statements whose answers the write needs only once it has
    committed (:meth:`defer`: an entity's ``INSERT``, ``UPDATE`` or ``DELETE``, its history
    version) go with the receipt and the ``COMMIT``, in one round trip
    (:func:`..tables.receipts.commit_batch`); a transaction of only those is one round trip."""

    deferring = True  # takes statements to send with its COMMIT (atomic() does not)

    def __init__(self, conn: BaseDatabaseWrapper) -> None:
        self.conn = conn
        self.begun = False  # BEGIN sent, or handed to the first statement
        self.receipt: tuple[bytes, int, dict[str, Any]] | None = None
        self.deferred: list[bytes] = []
        self.then: list[tuple[int, Callable[[int, int, tuple[Any, ...]], None]]] = []

    def __enter__(self) -> _DriverTransaction:
        conn = self.conn
        conn.validate_thread_sharing()
        conn.ensure_connection()
        with conn.wrap_database_errors:
            sessions.allow_many_statements(conn.connection)
        return self

    def opening(self) -> str:
        """What the next statement sent starts with: ``"BEGIN; "`` until the transaction has
        begun (that statement's query runs both; its first answer is ``BEGIN``'s)."""
        if self.begun:
            return ""
        self.begun = True
        return "BEGIN; "

    def begin(self) -> None:
        """``BEGIN`` alone, unless the transaction has begun."""
        if not self.begun:
            self.begun = True
            with self.conn.wrap_database_errors:
                self.conn.connection.begin()

    def defer(
        self,
        sql: str,
        params: Sequence[Any],
        then: Callable[[int, int, tuple[Any, ...]], None] | None = None,
    ) -> None:
        """Send ``sql`` with the ``COMMIT``; ``then(lastrowid, rowcount, rows)`` once
        committed (``rows``: a ``SELECT``'s answer)."""
        self.defer_rendered(literals.statement(self.conn.connection, sql, params), then)

    def defer_rendered(
        self, sql: bytes, then: Callable[[int, int, tuple[Any, ...]], None] | None = None
    ) -> None:
        if then is not None:
            self.then.append((len(self.deferred), then))
        self.deferred.append(sql)

    def defer_receipt(self, write_id: bytes, created: int, result: dict[str, Any]) -> None:
        """Send the write's receipt with the ``COMMIT``, in its round trip."""
        self.receipt = (write_id, created, result)

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        driver = self.conn.connection
        if exc_type is not None:
            if self.begun:
                with contextlib.suppress(Exception):
                    driver.rollback()
            return
        if driver is None:  # discarded inside the transaction (a lost connection elsewhere):
            # its session, and so its transaction, is gone; nothing was committed
            raise ShardUnavailable(self.conn.alias, "connection closed in a transaction", lost=True)
        with self.conn.wrap_database_errors:
            if self.receipt is None and not self.deferred:
                if self.begun:
                    driver.commit()
                return
            try:
                outcomes = receipt_table.commit_batch(
                    driver, self.deferred, self.receipt, begin=not self.begun
                )
            except BaseException:
                # A failed statement left the transaction open: after an interrupt too, once
                # the batch's answers were read (its COMMIT never ran), else the session's
                # next BEGIN would commit the statements before the failed one.
                with contextlib.suppress(Exception):
                    driver.rollback()
                raise
        for position, then in self.then:
            then(*outcomes[position])


def retrying_lost(alias: str, operation: Callable[[], T]) -> T:
    """Run ``operation`` (a whole transaction) under the store's write lock with its retries,
    and again on a fresh connection after a lost one (outside a caller's transaction)."""
    for losses in range(LOST_ATTEMPTS + 1):
        try:
            with write_lock(), shards.errors_named(alias):
                return retries.with_retries(operation, alias)
        except ShardUnavailable as unavailable:
            if not retry_after_loss(unavailable, alias, losses):
                raise
    raise AssertionError("unreachable")


def retry_after_loss(unavailable: ShardUnavailable, alias: str, losses: int) -> bool:
    """Whether a transaction of the store's own that failed with ``unavailable`` runs again on
    a fresh connection: an open connection was lost, tries are left, and no transaction of
    the caller's is open on ``alias`` (only the caller could run that again)."""
    return (
        unavailable.lost and losses < LOST_ATTEMPTS and not shards.connection(alias).in_atomic_block
    )
