"""Step 5 of the write protocol (docs/design.md#write-protocol), and step 6's removals: delete
the index rows that the stored state, locked and read again, no longer implies. A write runs
it after its commit (:meth:`.protocol.Write.remove_stale`), the cleaner for the stale rows it
finds (:mod:`..cleaner.passes`, :mod:`..cleaner.repairs`).

A row is deleted only where the shard serves its bucket (the fence, as for inserts), and a row
a move took away is removed on its owner after the flip. On Galera a row lock is one node's,
so a deletion is checked again in a transaction that certification orders."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping

from django.db import transaction

from ..config.indexes import ENTITIES, Source
from ..exceptions import NotOwner, ShardUnavailable
from ..guards import fence
from ..tables import entities as entity_table
from ..tables.index_rows import Row
from ..topology import bucket_map, servers, shards
from . import index_writes
from .rows import RowSet, stored_rows
from .transaction import own_transaction, retrying_lost

logger = logging.getLogger("schemaless_store.writes")


def remove_stale(alias: str, candidates: Mapping[bytes, RowSet], source: Source = ENTITIES) -> int:
    """Step 5: delete the candidate rows that the stored rows, locked and read again, do not
    imply (a key put back meanwhile keeps its row), fenced as inserts are: a row whose shard
    no longer serves its bucket is removed on the owner after the flip, as a move's target may
    hold a copy the log's last replay will not reach. Returns the number deleted. On Galera a
    row lock is one node's: a write through another node may put a key back while this one
    deletes its row, so the deletion is checked again in a transaction that writes the rows
    (:func:`_certified_recheck`), which certification orders against such a write."""
    if not any(candidates.values()):
        return 0

    wanted = sorted({bucket_map.bucket_for(key) for key in candidates})
    deleted_rows: list[Row] = []  # by every try

    def attempt() -> tuple[int, dict[str, list[Row]]]:
        failure: ShardUnavailable | None = None
        conn = shards.connection(alias)
        with own_transaction(alias, conn) as tx:  # MariaDB: BEGIN goes with the locking read
            if not_served := fence.refused(conn, wanted):
                raise NotOwner(alias, set(not_served))
            first = tx.opening() if tx is not None else ""
            locked = entity_table.lock(alias, list(candidates), source, conn, first=first)
            doomed: list[Row] = []
            for key, rows in candidates.items():
                found = locked.get(key)
                now = stored_rows(key, None if found is None else found.body, source)
                doomed.extend((index, values, key) for index, values in rows - now)
            # Deleted now, whatever becomes of this try: a try that deadlocks after it (on
            # Galera, aborted by another node's write to these rows) leaves its deletions.
            deleted_rows.extend(doomed)
            try:
                deleted, refused = index_writes.delete(doomed)
            except ShardUnavailable as exc:
                # Keep the answering shards' deletions (SQLite: in this transaction); report.
                failure, deleted, refused = exc, 0, {}
        if failure is not None:
            raise failure
        return deleted, refused

    try:
        deleted, refused = retrying_lost(alias, attempt)
    except NotOwner as refused_here:
        # The rows moved: their stored state is on the owner now; re-check there.
        if shards.connection(alias).in_atomic_block:
            raise
        bucket_map.await_new_owner(alias, set(refused_here.buckets))
        regrouped: dict[str, dict[bytes, RowSet]] = defaultdict(dict)
        for key, rows in candidates.items():
            regrouped[bucket_map.alias_for(key)][key] = rows
        return sum(remove_stale(owner, rows, source) for owner, rows in regrouped.items())
    if deleted_rows and servers.is_galera(alias):
        _put_back(alias, deleted_rows, source)
    if refused:  # their buckets moved: re-checked and removed on the owners, after the flip
        deleted += remove_stale(alias, index_writes.await_owners(alias, refused), source)
    return deleted


def _put_back(alias: str, deleted: list[Row], source: Source) -> None:
    """Run :func:`_certified_recheck` of step 5's deletions on ``alias``, or, if a move has
    taken their keys since (:class:`NotOwner`), on each key's owner once the map names it:
    the deletions are made, so their re-check must run where the keys are now."""
    wanted = sorted({bucket_map.bucket_for(key) for _index, _values, key in deleted})
    try:
        retrying_lost(alias, lambda: _certified_recheck(alias, deleted, source, wanted))
    except NotOwner as moved:
        if shards.connection(alias).in_atomic_block:
            raise
        bucket_map.await_new_owner(alias, set(moved.buckets))
        regrouped: dict[str, list[Row]] = defaultdict(list)
        for row in deleted:
            regrouped[bucket_map.alias_for(row[2])].append(row)
        for owner, rows in regrouped.items():
            _put_back(owner, rows, source)


def _certified_recheck(alias: str, deleted: list[Row], source: Source, buckets: list[int]) -> int:
    """Galera, after step 5 deleted ``deleted``: write the rows of their keys (so that
    certification, or the applier's abort of a local lock holder, orders this transaction
    against any write of them through another node), read them again, and put back the index
    rows they imply once more. Returns the number put back.

    It writes entity rows, so it is fenced as every write is: if a move has taken the keys'
    ``buckets`` since step 5 ran, :class:`NotOwner` (:func:`_put_back` runs it on the owner,
    where it writes the rows only if that shard is Galera too: elsewhere row locks order it).
    Unfenced, it wrote a moved source's frozen copy after the flip, and the move's
    verification rightly held the move for an escaped write (docs/reliability.md)."""
    deleted = list(dict.fromkeys(deleted))
    keys = sorted({key for _index, _values, key in deleted})
    conn = shards.connection(alias)
    with transaction.atomic(using=alias):
        if not_served := fence.refused(conn, buckets):
            raise NotOwner(alias, set(not_served))
        if servers.is_galera(alias):
            entity_table.touch(alias, keys, source)
        locked = entity_table.lock(alias, keys, source)
        back = [
            (index, values, key)
            for index, values, key in deleted
            if (index, values) in stored_rows(key, getattr(locked.get(key), "body", None), source)
        ]
        index_writes.add(back)  # none: nothing to do
    return len(back)


def remove_quietly(alias: str, candidates: Mapping[bytes, RowSet], source: Source) -> None:
    """:func:`remove_stale`, for a write that is decided: a failure is logged, not raised."""
    try:
        remove_stale(alias, candidates, source)
    except Exception:
        # The write is decided; leftover rows are ignored by queries and swept by the cleaner.
        logger.exception("removing stale index rows on %s failed; the cleaner will do it", alias)
