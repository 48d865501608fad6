"""Adding and deleting index rows where they belong, only on shards that serve their buckets
(the fence): the write protocol's steps 3 and 5 (and the cleaner's inserts), with unique
indexes claimed one row at a time."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from django.db import IntegrityError, transaction
from django.db.transaction import TransactionManagementError

from ..config.indexes import ENTITIES, Index
from ..exceptions import NotOwner, ShardUnavailable, UniqueViolation
from ..guards import fence
from ..sql import dialects
from ..tables import entities as entity_table
from ..tables import index_rows as index_table
from ..tables.index_rows import Row
from ..topology import bucket_map, replicas, shards
from .rows import stored_rows

# Tries of a unique claim whose holder keeps releasing it (a crashed or failing writer).
CLAIM_ATTEMPTS = 5


def add(
    rows: Iterable[Row],
    wait: bool = True,
    noted_later: str | None = None,
    writer: str | None = None,
) -> None:
    """Insert index rows idempotently, one batched statement per (index, shard).

    Rows of unique indexes are claimed one by one first (:func:`claim_unique`). A shard that
    does not serve a row's bucket refuses it: with ``wait``, the rows go where the map, read
    again, puts them (after a flip under way finishes); without, :class:`NotOwner` is raised at
    once (the write protocol's step 3: its transaction must end before anyone waits for a flip,
    as the flip may be waiting for it).

    Each shard written gets this thread's position for reads from its replicas
    (:func:`..topology.replicas.note_write`), but ``noted_later``, whose own later commit will.

    ``writer``: the shard of the write whose step 3 this is; on SQLite its rows on another
    shard inside a caller's ``transaction.atomic()`` are refused (:func:`refuse_in_blocks`),
    after the unique claims, whose refusal of a taken value comes first.
    """
    rows = list(rows)
    plain = []
    written: set[str] = set()
    for index, values, entity_id in rows:
        if index.unique:
            claim_unique(index, values, entity_id, wait)
        else:
            plain.append((index, values, entity_id))
    if writer is not None and not dialects.of(shards.connection(writer)).index_writer:
        refuse_in_blocks(writer, rows)  # written on Django's connection, in the caller's block
    while plain:
        refused: list[Row] = []
        by_shard: dict[str, list[tuple[Index, list[tuple[Any, ...]]]]] = defaultdict(list)
        for (index, alias), grouped in index_table.group(plain).items():
            by_shard[alias].append((index, grouped))
        for alias, groups in by_shard.items():
            left = index_table.insert_on(alias, groups, fence.refused)
            written.add(alias)
            if left:
                # Their buckets moved (or are being flipped): insert them where they are now.
                moved = {index_table.bucket(index, row) for index, row in left}
                if not wait:
                    raise NotOwner(alias, moved)
                bucket_map.await_new_owner(alias, moved)
                refused.extend((index, tuple(row[:-1]), row[-1]) for index, row in left)
        plain = refused
    for alias in written - {noted_later}:  # positions for replica reads: once per shard
        replicas.note_write(alias, shards.index_connection(alias))


def refuse_in_blocks(writer: str, rows: Iterable[Row]) -> None:
    """SQLite: index rows use Django's connection there (:func:`..topology.shards.
    index_connection`), so a row on another shard than ``writer`` whose connection is in a
    caller's ``transaction.atomic()`` would commit or roll back with that block, not with the
    write: a block that rolls back would take away the row (or the unique claim) of an entity
    the write committed (I2). Refused; the write then rolls back, and step 6 removes the claims
    it made (docs/design.md#a-callers-transaction)."""
    homes = {index_table.home(index, values) for index, values, _key in rows} - {writer}
    for home in sorted(homes):
        if shards.connection(home).in_atomic_block:
            raise TransactionManagementError(
                f"this write on {writer!r} has index rows on {home!r}, where a "
                f"transaction.atomic(using={home!r}) is open: on SQLite they would be in that "
                f"block and roll back with it while the entity commits on {writer!r}. Write "
                f"it outside the block on {home!r}, or in a block on {writer!r} alone; "
                "nothing was written"
            )


def delete(rows: Iterable[Row]) -> tuple[int, dict[str, list[Row]]]:
    """Delete index rows where the map puts them, only on shards that serve their buckets (the
    fence, as for inserts: on MariaDB the index writer's snapshot, no statement; on SQLite a read
    of the bucket table under the store's write lock). Returns the number deleted and the rows
    refused, by the shard that refused them: their buckets moved away or are being flipped, so
    a copy of each may be on the move's target, where the source's removal would never be
    replayed (the log's last replay has run, or is about to). The caller removes those on the
    owner once the map names it. A shard that does not answer is reported after the others
    are done."""
    deleted = 0
    refused: dict[str, list[Row]] = defaultdict(list)  # only shards that refused a row
    unavailable: ShardUnavailable | None = None
    for (index, alias), grouped in index_table.group(rows).items():
        try:
            placed = [(row, index_table.bucket(index, row)) for row in grouped]
            with shards.errors_named(alias):
                denied = fence.refused(shards.index_connection(alias), {b for _r, b in placed})
            served = [row for row, bucket in placed if bucket not in denied]
            if denied:
                refused[alias].extend(
                    (index, tuple(row[:-1]), row[-1]) for row, bucket in placed if bucket in denied
                )
            deleted += index_table.delete(index, alias, served)
        except ShardUnavailable as exc:
            unavailable = unavailable or exc
    if unavailable is not None:
        raise unavailable
    return deleted, refused


def await_owners(
    alias: str, refused: Mapping[str, list[Row]]
) -> dict[bytes, set[tuple[Index, Any]]]:
    """The rows :func:`delete` refused, as step 5's candidates (by the key on ``alias`` that
    had them), once the map names their buckets' new owners (a flip under way
    finishes; :class:`NotOwner` after ``MOVE_WAIT``). The caller re-checks them under the
    rows' locks again and removes them there. Inside a caller's transaction on ``alias`` the
    store cannot wait for a flip (it may wait for that transaction): :class:`NotOwner`, and
    the cleaner removes them."""
    candidates: dict[bytes, set[tuple[Index, Any]]] = defaultdict(set)
    for shard, rows in refused.items():
        moved = {index_table.bucket(index, values) for index, values, _key in rows}
        if shards.connection(alias).in_atomic_block:
            raise NotOwner(shard, moved)
        bucket_map.await_new_owner(shard, moved)
        for index, values, key in rows:
            candidates[key].add((index, values))
    return candidates


def claim_unique(
    index: Index, values: tuple[Any, ...], entity_id: bytes, wait: bool = True
) -> None:
    """Insert a unique index row, or raise :class:`UniqueViolation` if another entity holds it.

    Like Vitess's consistent lookup vindex: the claim is made before the entity commits. A row
    already held by another entity is checked under that entity's lock: if the holder does not
    imply it any more (a crashed or failed write, or a pending removal), the stale claim is
    deleted and the claim retried; otherwise the value is taken.
    """
    for _attempt in range(CLAIM_ATTEMPTS):
        alias = index_table.home(index, values)
        try:
            while not index_table.claim(index, alias, values, entity_id, fence.refused):
                # Its bucket moved (or is being flipped): claim it where it is now.
                moved = {index_table.bucket(index, values)}
                if not wait:
                    raise NotOwner(alias, moved)
                bucket_map.await_new_owner(alias, moved)
                alias = index_table.home(index, values)
            replicas.note_write(alias, shards.index_connection(alias))
            return
        except IntegrityError:
            pass
        holder = index_table.holder(index, alias, values)
        if holder is None:
            continue  # released meanwhile
        if holder == entity_id:
            return
        if _holder_keeps_claim(index, values, holder):
            raise UniqueViolation(
                f"index {index.name!r}: {', '.join(index.properties)} = "
                f"{index.describe(values)} is already taken by entity {holder.hex()}",
                index=index.name,
                values=values,
            )
    raise UniqueViolation(
        f"index {index.name!r}: {index.describe(values)} is contended; try again",
        index=index.name,
        values=values,
    )


def unique_conflicts(rows: Iterable[Row]) -> dict[tuple[Index, tuple[Any, ...]], bytes]:
    """``{(index, values): holder}`` for the rows of unique indexes that another entity holds
    and still implies, read without locks: what :func:`claim_unique` would refuse now, found
    in one query per (index, shard) before anything is written. A claim made meanwhile is
    still refused by :func:`claim_unique` itself."""
    wanted: dict[tuple[Index, str], dict[tuple[Any, ...], bytes]] = defaultdict(dict)
    for index, values, entity_id in rows:
        if index.unique:
            wanted[index, index_table.home(index, values)][values] = entity_id
    taken: dict[tuple[Index, tuple[Any, ...]], bytes] = {}
    for (index, alias), claims in wanted.items():
        for values, holder in index_table.holders(index, alias, list(claims)).items():
            if values in claims and holder != claims[values]:
                taken[index, values] = holder
    if not taken:
        return taken
    bodies = entity_table.current(ENTITIES, set(taken.values()))
    return {
        (index, values): holder
        for (index, values), holder in taken.items()
        if (index, values) in stored_rows(holder, bodies.get(holder, (0, None, None))[2])
    }


def _holder_keeps_claim(index: Index, values: tuple[Any, ...], holder: bytes) -> bool:
    """True if ``holder`` implies the row; if not, delete its stale claim (under its lock).

    The holder is locked on this thread's connection, so if this thread has a transaction open
    there (the protocol's own, or its caller's), the locked read shows what that transaction
    wrote, which may yet roll back. The claim is then kept if either the locked state or the
    committed one implies it: a value this transaction releases stays taken until it commits.
    """
    holder_alias = bucket_map.alias_for(holder)
    open_before = shards.connection(holder_alias).in_atomic_block
    with shards.errors_named(holder_alias), transaction.atomic(using=holder_alias):
        locked = entity_table.lock(holder_alias, [holder]).get(holder)
        if (index, values) in stored_rows(holder, None if locked is None else locked.body):
            return True
        if open_before:
            committed = entity_table.committed_body(holder_alias, holder)
            if (index, values) in stored_rows(holder, committed):
                return True
        # Refused (the bucket moved): the next try claims on the owner, and judges its copy.
        delete([(index, values, holder)])
        return False
