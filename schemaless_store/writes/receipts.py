"""The receipt step of the write protocol (docs/design.md#receipts): how a write whose commit
answer was lost learns, rather than guesses, whether it landed.

Every write transaction of the protocol (:mod:`.protocol`) carries a random write id and, in
the transaction, inserts its receipt: the id, the time, and the result its caller returns
(:func:`record`; on the driver's ``BEGIN`` ... ``COMMIT`` route it is sent in the ``COMMIT``'s
round trip, first in that query: :func:`..tables.receipts.commit_batch`). A commit that lands
therefore leaves a receipt, and one that does not leaves none. When the answer of the commit is
lost (error 2013, 2006, a ``KILL``), :func:`recall` first ends the session that sent the commit
(on MySQL: ``KILL`` on the node it ran on, then waits until it is gone, since it may still be
running the query: :func:`..guards.fence.end_session`), then asks the same shard on a fresh
connection: a receipt means the write landed, and the protocol returns its recorded result
without running the write again; no receipt means it did not land, and the protocol runs it
again. If the shard cannot be asked, or the old session will not end, within
``SCHEMALESS["RECEIPT_WAIT"]`` seconds, :class:`~..exceptions.OutcomeUnknown`.

Inside a caller's ``transaction.atomic()`` no receipt is written: the commit is the caller's,
and the store never retries it.

Receipts older than ``SCHEMALESS["RECEIPT_RETENTION"]`` by the shard's clock are removed by the
writers themselves: every :data:`PRUNE_EVERY` writes on a shard, a process deletes up to
:data:`~..tables.receipts.REMOVE_BATCH` expired ones there, after its commit, in one short
statement. A retry that finds no receipt, and whose receipt would be that old by the same
clock, raises :class:`~..exceptions.OutcomeUnknown`: it may have been removed. More writes
mean more removals, so the table stays near (retention x write rate).
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
from ..sql import sessions
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


def record(write: Any, transaction: Any) -> None:
    """Step 4, inside the write's transaction: its receipt (``write.result``). On the driver's
    ``BEGIN`` ... ``COMMIT`` route (``transaction``, a ``_DriverTransaction``) it goes with
    the ``COMMIT``, in the same round trip; under ``atomic()`` it is inserted now."""
    if not RECORD:
        return
    created = write.receipt_created = int(time.time())
    if write.conn.vendor == "mysql":  # the session its commit will run in (no round trip)
        driver = write.conn.connection
        write.session = (getattr(driver, sessions.NODE, None), int(driver.thread_id()))
    defer = getattr(transaction, "defer_receipt", None)
    if defer is not None:
        defer(write.write_id, created, write.result)
        return
    with shards.statement_cursor(write.conn) as cursor:
        receipt_table.record(cursor, write.write_id, created, write.result)


def recall(write: Any, lost: ShardUnavailable) -> dict[str, int] | None:
    """After ``write``'s commit answer was lost (``lost``): its recorded result if it landed
    on ``write.alias``, None if it did not. Asks again on a fresh connection while the shard
    is unreachable, up to ``SCHEMALESS["RECEIPT_WAIT"]`` seconds; then
    :class:`OutcomeUnknown`."""
    deadline = time.monotonic() + conf.get().receipt_wait
    pause = 0.01
    # MySQL: the try's server session, ``(node or None, thread id)``, noted by record().
    session: tuple[tuple[str, int] | None, int] | None = getattr(write, "session", None)
    while True:
        try:
            if session is not None:  # None: SQLite, whose transaction ends with its connection
                # The old session may still run the commit's query (its receipt INSERT
                # waiting on a lock): "absent" is true only once it is gone.
                node, thread = session
                fence.end_session(write.alias, node, thread, until=deadline)
                session = None
            found = receipt_table.find(
                write.alias,
                write.write_id,
                write.receipt_created,
                galera=servers.is_galera(write.alias),
            )
            if found is None:
                _within_retention(write, lost)
        except OutcomeUnknown:
            raise  # past the retention: asking again changes nothing
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


def _within_retention(write: Any, lost: ShardUnavailable) -> None:
    """After "no receipt": :class:`OutcomeUnknown` unless the receipt, had it committed,
    would still be there. A removal deletes what is older than the retention by the shard's
    clock (:func:`prune`), which is read here after the find: "absent" proves nothing about a
    receipt within :data:`~..config.conf.RECEIPT_MARGIN` of that age or past it (a retry
    slower than the retention, a writer's clock behind the shard's)."""
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
    """Remove one batch of the receipts on ``alias`` older than the retention by the
    shard's clock (never this process's: a clock that runs ahead would remove receipts a
    retry still needs); returns how many (0 after a failure, which is logged)."""
    try:
        with write_lock():  # SQLite's one writer
            return receipt_table.remove_expired(alias, conf.get().receipt_retention)
    except Exception:
        logger.warning("removing expired receipts on %s failed; a later write will", alias)
        return 0
