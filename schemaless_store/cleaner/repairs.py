"""The cleaner's writes, through the write protocol's steps: index rows added idempotently
(step 3) and checked against the entities afterwards, stale rows removed under the entity's
lock (step 5), and rows found on the wrong shard deleted there."""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable
from functools import partial
from typing import Any

from django.db import transaction

from ..config.indexes import Index
from ..exceptions import CorruptBody, IndexValueError, UniqueViolation
from ..tables import entities as entity_table
from ..tables import index_rows as index_table
from ..tables.entities import EntityRow
from ..tables.index_rows import Row
from ..topology import bucket_map, retries, servers, shards
from ..topology.write_lock import write_lock
from ..values.codec import decode_body
from ..writes import index_writes, stale_rows
from .consistency import Diff
from .records import PassResult

# Index rows per INSERT statement: a statement holds its row (and gap) locks until it ends, so a
# long one can stall a writer inserting next to those rows.
INSERT_CHUNK = 500

# What a row was read at: (added_id, updated). Every write changes updated; a delete and
# re-create changes added_id.
Version = tuple[int, Any]


def insert_chunk() -> int:
    """Index rows per statement: :data:`INSERT_CHUNK`, or fewer where a Galera shard limits the
    rows of a write set (``wsrep_max_ws_rows``)."""
    limits = [servers.write_set_limit(alias) for alias in shards.shard_aliases()]
    return min([INSERT_CHUNK, *(limit for limit in limits if limit)])


def write(operation: Callable[[], Any]) -> Any:
    """Run index writes briefly under the store's write lock (it serializes SQLite shards),
    retried after a deadlock. On SQLite the batch is one transaction per shard file: index
    rows share Django's connection there, and a commit per row would be slow."""
    sqlite_aliases = [a for a in shards.shard_aliases() if shards.dialect(a).file_database]

    def attempt() -> Any:
        with contextlib.ExitStack() as stack:
            for alias in sqlite_aliases:
                stack.enter_context(transaction.atomic(using=alias))
            return operation()

    with write_lock():
        return retries.with_retries(attempt)


def index_entities(index: Index, alias: str, batch: list[EntityRow], result: PassResult) -> None:
    """Index these entities of ``alias`` from their bodies, decoded here (today's path: any
    body, any column type)."""
    rows: list[Row] = []
    seen: dict[bytes, Version] = {}
    for added_id, entity_id, updated, body in batch:
        properties = decode(alias, entity_id, body, result)
        if properties is None:
            continue
        try:
            implied = index.rows_for(properties)
        except IndexValueError as exc:
            result.note(f"entity {entity_id.hex()}: {exc}; it is not indexed")
            continue
        seen[entity_id] = (added_id, updated)
        rows.extend((index, values, entity_id) for values in implied)
    result.inserted += insert_checked(index, alias, rows, seen, result)


def apply_diff(
    index: Index, alias: str, diff: Diff, seen: dict[bytes, Version], result: PassResult
) -> None:
    """A batch's repairs from its ``diff``: each entity whose values do not fit the index noted,
    the missing rows inserted (:func:`insert_checked`, ``seen``: the versions they were
    computed from), the stale ones removed on their entities' shards (step 5)."""
    for entity_id in diff.unindexable:
        result.note(f"entity {entity_id.hex()}: its values do not fit index {index.name}")
    missing = [(index, values, entity_id) for values, entity_id in diff.missing]
    result.inserted += insert_checked(index, alias, missing, seen, result)
    for entity_alias, candidates in diff.stale_by_entity_shard().items():
        result.stale_removed += stale_rows.remove_stale(entity_alias, candidates, index.source)


def insert_checked(
    index: Index, alias: str, rows: list[Row], seen: dict[bytes, Version], result: PassResult
) -> int:
    """Insert rows computed from unlocked reads of entities on ``alias`` (``seen``: the
    version each was read at); then hand the rows of every entity that changed since, or is
    gone, to ``remove_stale``.

    A writer that changed the entity before our insert may already have removed the old row,
    which our insert would then bring back; one that changes it after our re-read removes the
    row itself. Returns the number of rows written and not taken back.
    """
    if not rows:
        return 0
    written = insert(index, rows, result)
    if not written:
        return 0
    ids = {entity_id for _, _, entity_id in written}
    now = entity_table.versions(index.source, alias, [seen[entity_id][0] for entity_id in ids])
    changed: dict[bytes, set[tuple[Index, tuple[Any, ...]]]] = defaultdict(set)
    for row_index, values, entity_id in written:
        if now.get(entity_id) != seen[entity_id]:
            changed[entity_id].add((row_index, values))
    taken_back = stale_rows.remove_stale(alias, changed, index.source) if changed else 0
    return len(written) - taken_back


def insert(index: Index, rows: list[Row], result: PassResult) -> list[Row]:
    """Insert the rows (step 3 of the protocol, in chunks); the ones written."""
    if not index.unique:
        chunk = insert_chunk()
        for start in range(0, len(rows), chunk):
            write(partial(index_writes.add, rows[start : start + chunk]))
        return rows
    # A unique claim can collide with another entity's: report that entity, go on.
    written = []
    for row in rows:
        try:
            write(partial(index_writes.add, [row]))
        except UniqueViolation as exc:
            result.note(f"entity {row[2].hex()} is not indexed: {exc}")
            continue
        written.append(row)
    return written


def delete_on(index: Index, alias: str, rows: list[tuple[Any, ...]]) -> int:
    """Delete these exact rows from the index table on ``alias`` (not where they route): rows
    the sweep found on the wrong shard by the map. Only those whose bucket ``alias``'s own
    bucket table holds in no state, or as ``gone`` (read in the ``DELETE``'s transaction:
    :func:`..tables.index_rows.delete_not_held`): the map may be older than a move's flip
    (``MAP_MAX_AGE``), and a shard that owns the bucket, or a move's target copying it in,
    holds the real rows, which no lock re-check would protect."""
    if not rows:
        return 0
    return write(partial(index_table.delete_not_held, index, alias, rows))


def decode(
    alias: str, entity_id: bytes, body: bytes | None, result: PassResult
) -> dict[str, Any] | None:
    """An entity's properties; None (noted) for a corrupt body."""
    if body is None:  # a cell version without a body: it implies no index row
        return {}
    try:
        return decode_body(body)
    except CorruptBody as exc:
        result.note(f"entity {entity_id.hex()} on {alias} has a corrupt body ({exc}); skipped")
        return None


def implied(
    index: Index, entity_id: bytes, body: bytes | None, result: PassResult
) -> set[tuple[Any, ...]] | None:
    """The rows of ``index`` an entity implies; None for a corrupt body."""
    properties = decode(bucket_map.alias_for(entity_id), entity_id, body, result)
    if properties is None:
        return None
    try:
        return index.rows_for(properties)
    except IndexValueError:
        return set()  # the entity cannot be in this index: any row of it is stale
