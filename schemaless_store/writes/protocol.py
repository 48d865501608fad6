"""The write protocol (docs/design.md#write-protocol), written once. Every writer runs it: ``save``,
``create``, ``bulk_put`` and ``delete`` of entities (:mod:`.entity_writes`), ``Cell.objects.put``,
and the cleaner's repairs (steps 3 and 5).

A :class:`Write` is one transaction on one shard over a batch of :class:`Change` objects of one
source (entities, or the latest version of a cell column). :func:`run` takes it through:

0. **fence**: check, share-locked, that the shard serves the buckets of the rows (its own
   bucket table is the authority: :mod:`..tables.buckets`); a shard that does not is asked
   no further, and the write runs again where the map, read again, puts it;
1. **lock**: ``SELECT ... FOR UPDATE`` the rows that may exist, and learn the index rows their
   stored state implies. A *fresh* key is not read: its ``INSERT`` locks it, and implies no
   index rows before (a generated key cannot exist; a ``create``'s given id must not: a
   duplicate fails the ``INSERT`` and the write raises :class:`EntityExists`, before step 3
   adds a row: an ``INSERT`` that waits for the ``COMMIT`` is of a row with no index rows);
2. **store**: the caller's step writes the rows (an entity's ``INSERT``, ``UPDATE`` or
   ``DELETE`` between Django's signals, a cell and its head row), locked until the commit
   (a new row that implies index rows is locked by its ``INSERT`` here, before step 3: every
   remover re-checks a row under its entity's lock, docs/design.md#rows-under-the-lock);
3. **index**: add the index rows whose keys are new, committed at once on the index shards' own
   connections (unique indexes claim theirs first), so every row the new state needs exists
   before it commits; a unique claim that collides checks the holder under *its* row lock,
   which is why the rows are written (step 2) before this step;
4. **receipt and commit**: insert the write's receipt (its id and the result its caller
   returns) in the transaction (:mod:`.receipts`), commit, then invalidate the changed
   entities in the entity cache, if any (:mod:`..cache.entity_cache`; inside a caller's
   ``transaction.atomic()``, once it commits; no receipt there). On MariaDB's driver route
   ``BEGIN`` goes with step 1's read, and a single entity's step 2 statements with the
   receipt and the ``COMMIT``, after step 3 (:mod:`.with_commit`, :meth:`Write.carrier`),
   but a new row's ``INSERT`` when it implies index rows (step 2);
5. **remove stale** (:mod:`.stale_rows`): lock each changed row again, re-check which of the
   keys that went away it still lacks (a later writer may have put one back), and delete only
   those index rows; inside a caller's ``transaction.atomic()`` this waits for the caller's
   commit;
6. **undo**, if anything failed: remove the index rows this write added that the stored state
   does not imply (best effort: the cleaner removes whatever is left). After a lost commit
   answer it waits, with a second run of step 4's invalidation, for the receipt
   (:meth:`Write.settle`); the first runs at once.

A commit whose answer is lost (the connection ended by a move's fence, a failover) is not
guessed at: the write asks the shard for its receipt (:func:`.receipts.recall`). Present, the
write landed and returns the recorded result; absent, it did not, and it runs again; the shard
unreachable, :class:`~..exceptions.OutcomeUnknown`.

A crash between any two steps leaves at worst an index row that its entity does not imply,
which queries ignore (they re-check every entity) and the cleaner removes.
"""

from __future__ import annotations

import os
import random
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from django.db import IntegrityError, transaction
from django.db.transaction import TransactionManagementError

from ..cache import entity_cache
from ..config.indexes import ENTITIES, Source
from ..exceptions import Conflict, EntityExists, NotOwner, ShardUnavailable
from ..guards import fence
from ..sql import dialects, literals
from ..sql.deadlock_watch import Watch
from ..tables import entities as entity_table
from ..tables.entities import Locked
from ..tables.index_rows import Row
from ..topology import bucket_map, replicas, retries, shards
from ..topology.write_lock import write_lock
from ..values.expected import Expected
from . import index_writes, receipts, stale_rows, swallowed
from .rows import RowSet, rows_stored, stored_properties
from .transaction import retry_after_loss, shard_transaction

# Tries after a duplicate key: a key taken as new that a concurrent writer inserted meanwhile
# (the next try locks it and updates it), or the first head row of a cell column inserted by
# two writers at once (the next try finds it).
DUPLICATE_ATTEMPTS = 20


@dataclass
class Change:
    """One row a write changes, and the index rows it is to imply afterwards."""

    key: bytes  # an entity id, or a cell's row key
    rows: RowSet  # the index rows of the state after the write (the store step may adjust)
    body: bytes = b""  # the new body of an entity (unused by deletions and cells)
    # Not read in step 1: its INSERT locks it (a key the store just generated, which no row
    # can have yet; or an insert_only write's, whose duplicate key fails the INSERT).
    fresh: bool = False
    # Someone may have read (and cached) the key: the write invalidates it in the entity
    # cache. False for a key the store just generated, which no one has read.
    seen: bool = True
    found: Locked | None = None  # the stored row, read under the lock (step 1)
    # A partial change's stored properties, decoded once in step 1 (None: no row, an
    # undecodable body, or a whole change).
    stored: dict[str, Any] | None = None
    old: RowSet = field(default_factory=set)  # the index rows the stored row implies
    expected: Expected | None = None  # a conditional write: what the row must still be
    # Not read in step 1 either: a partial update the server applies (:mod:`.server_updates`),
    # whose statement checks in its WHERE what it needs, and which no index row follows.
    blind: bool = False
    # save(update_fields=...): only these properties change, over the stored body (the store
    # step computes body and rows from the row step 1 read).
    only: frozenset[str] | None = None


class Write:
    """One transaction on one shard over changes of one source; :func:`run` runs it.
    ``insert_only``: the rows must be new (``create``): a duplicate raises
    :class:`EntityExists`. ``quiet``: nothing but the store's own statements runs inside the
    transaction (no signal receivers), so it may be a plain ``BEGIN`` ... ``COMMIT`` on MariaDB."""

    def __init__(
        self,
        alias: str,
        changes: list[Change],
        source: Source = ENTITIES,
        *,
        insert_only: bool = False,
        quiet: bool = True,
        defers: bool = False,
    ) -> None:
        # The plan: what to write and how, all decided here, by the caller's one call.
        self.alias = alias
        self.conn = shards.connection(alias)
        self.changes = changes
        self.buckets = sorted({bucket_map.bucket_for(change.key) for change in changes})
        self.source = source
        self.insert_only = insert_only
        self.quiet = quiet
        # Step 2 may send its statements with the COMMIT (:meth:`carrier`): the writer needs
        # none of their answers before it, and no signal receiver runs.
        self.defers = defers
        # The run, set by this module alone as it takes the plan through the steps.
        self.added: dict[bytes, RowSet] = defaultdict(set)  # by any try: undone on failure
        self.stale: dict[bytes, RowSet] = {}  # keys that went away: removed after the commit
        self.committing = False  # the commit was sent (a lost answer leaves it unknown)
        self.write_id = os.urandom(16)  # its receipt's key: one per write, whatever the tries
        self.receipt_created = 0  # the time the last try's receipt says (the key's other half)
        # MariaDB: the server session the try's commit runs in, ``(node or None, thread id)``.
        self.session: tuple[tuple[str, int] | None, int] | None = None
        # What the caller returns (step 2 returns it; the receipt keeps it): e.g. an
        # entity's added_id, the rows written, the number deleted.
        self.result: dict[str, Any] = {}
        self.recalled = False  # a lost answer's receipt said the write had landed
        self.tx: Any = None  # the try's shard transaction (a _DriverTransaction, or None)

    @property
    def fenced_by_insert(self) -> bool:
        """SQLite, one new key (``create``): its ``INSERT`` checks the bucket itself, in the
        same statement (:func:`~..tables.entities.insert_one_fenced`), and step 0 reads
        nothing. On MariaDB step 0 reads nothing anyway (:mod:`..guards.fence`)."""
        return (
            len(self.changes) == 1
            and self.changes[0].fresh
            and not dialects.of(self.conn).fence_by_kill
        )

    def fence(self) -> None:
        """Step 0: :class:`NotOwner` unless the shard serves every bucket the write touches
        (MariaDB: checked against the connection's snapshot, no statement)."""
        if self.buckets and not self.fenced_by_insert:
            refused = fence.refused(self.conn, self.buckets)
            if refused:
                raise NotOwner(self.alias, set(refused))

    def move_to(self, alias: str) -> None:
        """Run on ``alias`` from now on (the shard that owns the buckets now)."""
        self.alias = alias
        self.conn = shards.connection(alias)
        for change in self.changes:
            change.fresh = False  # the row may have moved there with its bucket

    def lock(self) -> None:
        """Step 1: lock the stored rows and learn what they imply."""
        wanted = [c.key for c in self.changes if not (c.fresh or c.blind)]
        found = {}
        if wanted:  # on the driver's route BEGIN goes with this read
            first = self.tx.opening() if hasattr(self.tx, "opening") else ""
            found = entity_table.lock(self.alias, wanted, self.source, self.conn, first=first)
        for change in self.changes:
            change.found = found.get(change.key)
            body = None if change.found is None else change.found.body
            stored = stored_properties(change.key, body, self.source)
            change.old = rows_stored(stored, self.source)
            # Kept for a partial change's merge in step 2 only (an import's batch holds
            # every change to its end: no decoded copy of each body beside the bytes).
            change.stored = stored if change.only is not None else None
        # A conditional write's check, under the lock just taken: nothing can change the row
        # between it and the commit (:mod:`..values.expected`).
        changed = [
            uuid.UUID(bytes=c.key)
            for c in self.changes
            if c.expected is not None and not c.expected.matches(c.found)
        ]
        if changed:
            raise Conflict(changed)

    def carrier(self, size: int) -> Any:
        """Step 2: the transaction that sends the step's statements (about ``size`` bytes of
        values) with its ``COMMIT``, in one round trip: when the write :attr:`defers`, runs on
        the driver's ``BEGIN`` ... ``COMMIT`` route, and the statements fit one query. Else
        None, with the transaction begun: the step sends its statements as they come."""
        tx = self.tx
        if not getattr(tx, "deferring", False):
            return None
        if self.defers and size * 2 < literals.MAX_STATEMENT_BYTES:  # escaping may double
            return tx
        tx.begin()
        return None

    def after_loss(self) -> None:
        """Before a try on a fresh connection (the last one did not land: no receipt): the
        keys may exist now (a concurrent writer), so they are locked and read like any
        other."""
        for change in self.changes:
            change.fresh = False

    def after_recall(self, recorded: dict[str, int]) -> None:
        """The receipt of a lost answer says the write landed: take its result, and do what
        follows a commit (step 5; the position for read-your-writes is not known)."""
        self.result = recorded
        self.recalled = True
        if replicas.replicas_of(self.alias):
            replicas.set_positions({**replicas.positions(), self.alias: replicas.UNKNOWN})
        if self.stale:
            self.remove_stale()

    def settle(self, cached: list[bytes], landed: bool | None) -> None:
        """After a lost commit answer, once :func:`.receipts.recall` ended the session that
        sent the commit and read the receipt (``landed``), or could not (None): invalidate
        the written ids now, when no late commit can follow (docs/cache.md#a-lost-commit-answer),
        and undo this try's index rows only if it certainly did not land (step 6 before
        that removed the rows of a create landing just after). Unknown, the rows stay (the
        cleaner removes them if it did not land) and this process reads no cache for
        ``CACHE_TIMEOUT``: the session may yet commit after the invalidation."""
        if self.source is ENTITIES and cached:
            entity_cache.invalidate(cached)
            if landed is None:
                entity_cache.distrust("a write's outcome is unknown")
        if landed is False:
            self.undo()

    def add_index_rows(self) -> None:
        """Step 3: add the rows whose keys are new; note the ones that went away (the stale
        candidates of earlier tries are kept: step 5 re-checks every one under its lock)."""
        new_rows: list[Row] = []
        for change in self.changes:
            new = change.rows - change.old
            if new:
                self.added[change.key] |= new
                for index, values in new:
                    new_rows.append((index, values, change.key))
            gone = change.old - change.rows
            if gone:
                self.stale[change.key] = self.stale.get(change.key, set()) | gone
        # The write's own commit, later on this shard, records a position past these rows'.
        index_writes.add(new_rows, wait=False, noted_later=self.alias, writer=self.alias)

    def remove_stale(self) -> None:
        """Step 5 (after the commit): its failure leaves rows queries ignore, for the cleaner."""
        stale_rows.remove_quietly(self.alias, self.stale, self.source)

    def undo(self) -> None:
        """Step 6: remove the rows this write added that the stored state does not imply."""
        if any(self.added.values()):
            stale_rows.remove_quietly(self.alias, self.added, self.source)


# Step 2: writes the rows of a try (on ``write.conn``, in its transaction) and returns the
# write's result.
Step = Callable[[Write], dict[str, Any]]


class SplitWrite(Exception):
    """A refused batch whose rows now belong to several shards: its caller regroups it."""


def run(write: Write, store: Step) -> None:
    """Take ``write`` through the protocol; ``store`` is step 2 (it writes the rows and
    returns the write's result).

    A shard that refuses the write's buckets (step 0) has given them to another: after the map
    names the new owner, the write runs there. Inside a caller's ``transaction.atomic()`` on
    the shard it cannot (the transaction is the caller's): :class:`NotOwner` reaches the
    caller. :class:`SplitWrite` if a batch's rows now belong to several shards."""
    # A key the store just generated was never read by anyone: nothing cached to invalidate.
    cached = [change.key for change in write.changes if change.seen]
    losses = 0
    while True:
        caller_atomic = write.conn.in_atomic_block
        try:
            _run_here(write, store, cached if write.source is ENTITIES else [])
            return
        except ShardUnavailable as unavailable:
            # A connection lost (killed by a move's fence, or its node failed over): the next
            # try opens a fresh one, which reads the shard's state anew.
            if caller_atomic:
                raise
            if write.committing:
                # The commit was sent: its receipt, on that shard, says whether it landed.
                # Step 6 and a second invalidation wait for it (settle): the old session
                # may commit until the recall has ended it. The first invalidation is now,
                # so that a commit that has landed is not hidden by the cache meanwhile
                # (a reader that read the shard before a late commit is, until settle's).
                try:
                    if cached and write.source is ENTITIES:
                        entity_cache.invalidate(cached)
                    recorded = receipts.recall(write, unavailable)
                except BaseException:
                    write.settle(cached, landed=None)
                    raise
                write.settle(cached, landed=recorded is not None)
                if recorded is not None:
                    write.after_recall(recorded)
                    return
            if not retry_after_loss(unavailable, write.alias, losses):
                raise
            losses += 1
            write.after_loss()
            time.sleep(random.uniform(0, 0.005 * losses))
        except NotOwner as refused:
            if caller_atomic:
                raise
            # Outside the transaction (its share locks released): the flip may be waiting on it.
            bucket_map.await_new_owner(refused.alias, set(refused.buckets))
            owners = {bucket_map.alias_for(change.key) for change in write.changes}
            if len(owners) != 1:
                raise SplitWrite() from refused
            write.move_to(owners.pop())


def _run_here(write: Write, store: Step, cached: list[bytes]) -> None:
    alias, conn = write.alias, write.conn
    caller_atomic = conn.in_atomic_block

    def attempt() -> None:
        write.committing = False
        with shard_transaction(write, conn) as shard_tx, swallowed.watched(conn, write.quiet) as w:
            try:
                steps(shard_tx, w)
            except TransactionManagementError:
                if w is not None:  # a receiver's own atomic() caught a deadlock: run again
                    swallowed.check(w, alias)
                raise

    def steps(shard_tx: Any, w: Watch | None) -> None:
        write.tx = shard_tx
        write.fence()  # 0
        write.lock()  # 1 (on MariaDB's driver route, BEGIN goes with its read)
        if not write.defers and shard_tx is not None:
            shard_tx.begin()  # before a step 2 that sends its statements itself
        write.result = store(write)  # 2 (write.carrier(): may wait for the COMMIT, step 4)
        write.add_index_rows()  # 3
        if w is not None:
            swallowed.check(w, alias)  # a receiver caught a deadlock: the transaction is gone
        if not caller_atomic:
            write.receipt_created, write.session = receipts.record(write, shard_tx)  # 4
        write.committing = True  # 4: the commit, as attempt() leaves its block

    lost_commit = False
    try:
        try:
            with write_lock(), shards.errors_named(alias):
                _retrying_duplicates(write, lambda: retries.with_retries(attempt, alias))
        except ShardUnavailable:
            # A commit sent and its answer lost: its session may still commit, so step 6
            # and a second invalidation wait until the recall has ended it and read the
            # receipt (run(), Write.settle). Anything else failed before the commit: undone
            # now.
            lost_commit = write.committing and not caller_atomic
            if not lost_commit:
                write.undo()
            raise
        except BaseException:
            write.undo()  # 6, outside the write lock: a refused removal waits for the flip
            raise
    finally:
        # 4: after the commit, before the write returns; after any other failure too, as
        # before (a rare path; nothing it wrote committed). After a lost commit answer: in
        # run(), at once and again once the outcome is known. It never raises.
        if lost_commit:
            pass
        elif cached and caller_atomic:
            entity_cache.invalidate_on_commit(cached, alias)  # also if dropped unrun
        elif cached:
            entity_cache.invalidate(cached)
    # The write's position on its shard, for reads from replicas (read-your-writes).
    if caller_atomic and replicas.replicas_of(alias):
        transaction.on_commit(partial(replicas.note_write, alias, conn), using=alias)
    elif not caller_atomic:
        replicas.note_write(alias, conn)
        receipts.prune_now(alias)
    if write.stale:  # 5
        if caller_atomic:
            transaction.on_commit(write.remove_stale, using=alias, robust=True)
        else:
            write.remove_stale()


def _retrying_duplicates(write: Write, operation: Callable[[], Any]) -> None:
    for attempt in range(DUPLICATE_ATTEMPTS):
        try:
            operation()
            return
        except IntegrityError as exc:
            if write.insert_only:
                ids = ", ".join(str(uuid.UUID(bytes=c.key)) for c in write.changes)
                raise EntityExists(f"an entity with id {ids} already exists") from exc
            if attempt == DUPLICATE_ATTEMPTS - 1:
                raise
        for change in write.changes:
            change.fresh = False  # lock them all: some exist now
        time.sleep(random.uniform(0, 0.002 * (attempt + 1)))
