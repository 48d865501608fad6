"""The receipt step of the write protocol (docs/design.md#receipts): how a write whose commit
answer was lost learns, rather than guesses, whether it landed.

Every write transaction of the protocol (:mod:`.protocol`) carries a random write id and, in
the transaction, inserts its receipt: the id, the time, and the result its caller returns
(:func:`record`; on the driver's ``BEGIN`` ... ``COMMIT`` route it is sent in the ``COMMIT``'s
round trip, first in that query: :func:`..tables.receipts.commit_batch`). A commit that lands
therefore leaves a receipt, and one that does not leaves none. When the answer of the commit is
lost (error 2013, 2006, a ``KILL``), :func:`recall` first ends the session that sent the commit
(on MariaDB: ``KILL`` on the node it ran on, then waits until it is gone, since it may still be
running the query: :func:`..guards.fence.end_session`), then asks the same shard on a fresh
connection: a receipt means the write landed, and the protocol returns its recorded result
without running the write again; no receipt means it did not land, and the protocol runs it
again. If the shard cannot be asked, or the old session will not end, within
``SCHEMALESS["RECEIPT_WAIT"]`` seconds, :class:`~..exceptions.OutcomeUnknown`.

Inside a caller's ``transaction.atomic()`` no receipt is written: the commit is the caller's,
and the store never retries it.

Receipts older than ``SCHEMALESS["RECEIPT_RETENTION"]`` by the shard's clock are removed by the
writers themselves: every :data:`PRUNE_EVERY` writes on a shard, a process raises the shard's
pruned line to that age and deletes up to :data:`~..tables.receipts.REMOVE_BATCH` receipts at
or below it, after its commit, in one short transaction. A retry that finds no receipt raises
:class:`~..exceptions.OutcomeUnknown` if its receipt's ``created`` is at or below the line
(it may have been removed, by any process, whatever its retention), or if the receipt would
be near this process's retention by the shard's clock (a pruner from before the line). More
writes mean more removals, so the table stays near (retention x write rate).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from typing import Any

from ..config import conf
from ..exceptions import OutcomeUnknown, ShardUnavailable
from ..guards import fence
from ..sql import dialects, sessions
from ..sql.server_errors import no_table
from ..tables import receipts as receipt_table
from ..topology import servers, shards
from ..topology.write_lock import write_lock

logger = logging.getLogger("schemaless_store.writes")

# Writes on one shard (in this process) between two removals of expired receipts.
PRUNE_EVERY = 256
# For the bench's A/B measurement of what receipts cost, and nothing else: without receipts a
# lost commit answer cannot be told apart, so the retry would guess again.
RECORD = True

_writes: Counter[str] = Counter()
_writes_lock = threading.Lock()


def record(write: Any, transaction: Any) -> tuple[int, tuple[tuple[str, int] | None, int] | None]:
    """Step 4, inside the write's transaction: its receipt (``write.result``). On the driver's
    ``BEGIN`` ... ``COMMIT`` route (``transaction``, a ``_DriverTransaction``) it goes with
    the ``COMMIT``, in the same round trip; under ``atomic()`` it is inserted now. Returns the
    receipt's ``created`` and, on MariaDB, the session its commit runs in, ``(node or None,
    thread id)``: what :func:`recall` asks for after a lost answer."""
    if not RECORD:
        return 0, None
    created = int(time.time())
    session = None
    if dialects.of(write.conn).driver_route:  # the session its commit will run in (no round trip)
        driver = write.conn.connection
        session = (getattr(driver, sessions.NODE, None), int(driver.thread_id()))
    defer = getattr(transaction, "defer_receipt", None)
    if defer is not None:
        defer(write.write_id, created, write.result)
        return created, session
    with shards.statement_cursor(write.conn) as cursor:
        receipt_table.record(cursor, write.write_id, created, write.result)
    return created, session


def recall(write: Any, lost: ShardUnavailable) -> dict[str, int] | None:
    """After ``write``'s commit answer was lost (``lost``): its recorded result if it landed
    on ``write.alias``, None if it did not. Asks again on a fresh connection while the shard
    is unreachable, up to ``SCHEMALESS["RECEIPT_WAIT"]`` seconds; then
    :class:`OutcomeUnknown`."""
    deadline = time.monotonic() + conf.get().receipt_wait
    pause = 0.01
    # MariaDB: the try's server session, ``(node or None, thread id)``, noted by record().
    session: tuple[tuple[str, int] | None, int] | None = write.session
    while True:
        try:
            if session is not None:  # None: SQLite, whose transaction ends with its connection
                # The old session may still run the commit's query (its receipt INSERT
                # waiting on a lock): "absent" is true only once it is gone.
                node, thread = session
                fence.end_session(write.alias, node, thread, until=deadline)
                session = None
            lookup = receipt_table.find(
                write.alias,
                write.write_id,
                write.receipt_created,
                galera=servers.is_galera(write.alias),
            )
            found = lookup.result
            if found is None:
                _above_the_line(write, lookup.pruned, lost)
                _within_retention(write, lost)
        except OutcomeUnknown:
            raise  # at or below the line, or past the retention: asking again changes nothing
        except ShardUnavailable as unreachable:
            if time.monotonic() + pause > deadline:
                raise OutcomeUnknown(
                    write.alias,
                    write.write_id.hex(),
                    f"its commit was sent and the answer lost ({lost}); the shard stayed "
                    f"unreachable, or the old session would not end, while asked for the "
                    f"write's receipt ({unreachable})",
                ) from unreachable
            time.sleep(pause * random.uniform(0.5, 1.5))
            pause = min(pause * 2, 1.0)
            continue
        logger.info(
            "write %s on %s: commit answer lost; receipt %s",
            write.write_id.hex(),
            write.alias,
            "found: it landed" if found is not None else "absent: it runs again",
        )
        return found


def _above_the_line(write: Any, pruned: int | None, lost: ShardUnavailable) -> None:
    """After "no receipt": :class:`OutcomeUnknown` unless the receipt's ``created`` is above
    the shard's pruned line, read in the same statement. Every removal, by any process and
    whatever its ``RECEIPT_RETENTION``, raises the line over what it deletes in its own
    transaction (:func:`prune`), so a receipt above it was never removed."""
    if pruned is None:
        raise OutcomeUnknown(
            write.alias,
            write.write_id.hex(),
            f"its commit was sent and the answer lost ({lost}); the shard has no pruned line "
            f"({receipt_table.HORIZON}: run manage.py migrateall), so a missing receipt "
            "proves nothing",
        )
    if write.receipt_created <= pruned:
        raise OutcomeUnknown(
            write.alias,
            write.write_id.hex(),
            f"its commit was sent and the answer lost ({lost}); no receipt was found, but "
            f"its created ({write.receipt_created}) is at or below the shard's pruned line "
            f"({pruned}): a process may have removed it, whatever the retention it prunes by",
        )


def _within_retention(write: Any, lost: ShardUnavailable) -> None:
    """After "no receipt" above the line: :class:`OutcomeUnknown` unless the receipt, had it
    committed, would still be there by this process's retention too. It adds safety against a
    pruner that does not raise the line (a process of a version from before it, during a
    rolling upgrade): such a removal deletes what is older than its retention by the shard's
    clock, which is read here after the find: "absent" proves nothing about a receipt within
    :data:`~..config.conf.RECEIPT_MARGIN` of that age or past it (a retry slower than the
    retention, a writer's clock behind the shard's)."""
    retention = conf.get().receipt_retention
    age = receipt_table.age(write.alias, write.receipt_created)
    if age > retention - conf.RECEIPT_MARGIN:
        raise OutcomeUnknown(
            write.alias,
            write.write_id.hex(),
            f"its commit was sent and the answer lost ({lost}); no receipt was found, but "
            f"the receipt would be {age} s old by the shard's clock, too near the "
            f"retention ({retention:g} s, SCHEMALESS['RECEIPT_RETENTION']) to prove it never "
            "committed: it may have been removed",
        )


def prune_now(alias: str) -> None:
    """After a write committed on ``alias``: every :data:`PRUNE_EVERY` of them, remove a batch
    of expired receipts there (a failure is logged: the next batch will do)."""
    with _writes_lock:
        _writes[alias] += 1
        due = _writes[alias] % PRUNE_EVERY == 0
    if due:
        prune(alias)


def prune(alias: str) -> int:
    """Raise the pruned line of ``alias`` to the retention's age by the shard's clock (never
    this process's: a clock that runs ahead would remove receipts a retry still needs), and
    remove one batch of the receipts at or below it; returns how many (0 after a failure,
    which is logged)."""
    try:
        with write_lock():  # SQLite's one writer
            return receipt_table.remove_expired(
                alias, conf.get().receipt_retention, galera=servers.is_galera(alias)
            )
    except Exception as exc:
        hint = ": run manage.py migrateall" if no_table(exc) else "; a later write will"
        logger.warning("removing expired receipts on %s failed (%s)%s", alias, exc, hint)
        return 0
