"""The cleaner's three passes over one (index, shard) (docs/design.md#cleaner):

- **backfill** (only while the index is ``building``): walk the source by ``added_id``, in
  batches, up to the highest ``added_id`` seen when the backfill started (later entities were
  written by writers that maintain the index), inserting the rows each entity implies with
  idempotent statements, and saving a checkpoint after every batch: a killed backfill resumes
  from its checkpoint;
- **repair**: walk the source newest ``updated`` first, compare each batch with the index
  (:func:`~schemaless_store.cleaner.consistency.compare`), insert missing rows, remove stale ones
  with
  the write protocol's locked re-check;
- **sweep**: walk the index table on the shard by primary key and remove rows whose entity no
  longer exists (orphans) or no longer implies them (stale); rows on the wrong shard by the
  map (after buckets moved) are re-added where they belong, then deleted where the shard's
  own bucket table holds their bucket in no state or as gone (the map may be old).

Entities are read with plain reads (no locks): a batch never blocks a writer. A row inserted
from such a read can race with a writer that changes the entity meanwhile, so every insert is
checked afterwards (:func:`.repairs.insert_checked`).

Each pass takes the :class:`~.worker.Cleaner` that runs it, for its batches (throttled,
stoppable), batch size and progress bars: what a pass needs of it is :class:`PassRunner`, so
this module need not import the worker that imports it.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any, Protocol, cast

from django.db import DEFAULT_DB_ALIAS
from tqdm import tqdm

from ..config.indexes import Index
from ..config.metadata import CleanerCheckpoint
from ..tables import counts, json_index
from ..tables import entities as entity_table
from ..tables import index_rows as index_table
from ..tables.entities import EntityRow
from ..tables.index_rows import Row
from ..tables.json_index import ServerRow
from ..topology import bucket_map
from ..writes import stale_rows
from .consistency import compare
from .records import DONE, PassResult, start_record
from .repairs import Version, apply_diff, decode, delete_on, index_entities, insert_checked
from .server_rows import current_rows, extraction, fetch_batch, index_batch, local, repair_batch

logger = logging.getLogger("schemaless_store.cleaner")

Candidates = dict[str, dict[bytes, set[tuple[Index, tuple[Any, ...]]]]]


class PassRunner(Protocol):
    """What a pass needs of the :class:`~.worker.Cleaner` that runs it."""

    batch_size: int
    progress: bool

    def batches(
        self, fetch: Callable[[Any], list[Any]], result: PassResult
    ) -> Iterator[list[Any]]: ...

    def bar(self, desc: str, total: int | None, initial: int, unit: str) -> tqdm: ...


# --- backfill ----------------------------------------------------------------------------------


def backfill(cleaner: PassRunner, index: Index, alias: str, result: PassResult) -> None:
    checkpoint, _ = CleanerCheckpoint.objects.using(DEFAULT_DB_ALIAS).get_or_create(
        index_name=index.name, shard=alias
    )
    if checkpoint.done:
        return  # nothing to record: an earlier pass finished this shard
    start_record(result)
    source = index.source
    if checkpoint.target_added_id is None:
        target = entity_table.max_added_id(source, alias)
        checkpoint.target_added_id = target
        checkpoint.entities_total = entity_table.count(source, alias, upto=target)
        checkpoint.save(update_fields=["target_added_id", "entities_total", "changed"])
    elif checkpoint.last_added_id:  # resuming: the target was saved when the backfill began
        logger.info(
            "backfill of %s on %s resumes after added_id %d (%d of %s entities done)",
            index.name,
            alias,
            checkpoint.last_added_id,
            checkpoint.entities_done,
            checkpoint.entities_total,
        )
    upto = checkpoint.target_added_id
    assert upto is not None  # set above, or when the backfill began
    found = extraction(index, alias)
    in_place = [False]  # this batch's rows written by the server (decided as it is read)

    def fetch(_previous: Any) -> list[Any]:
        if found is None:
            return entity_table.after(
                source, alias, checkpoint.last_added_id, upto, cleaner.batch_size
            )
        in_place[0] = local(index, alias)
        return fetch_batch(index, found, alias, checkpoint.last_added_id, upto, cleaner.batch_size)

    with cleaner.bar(
        f"backfill {index.name} {alias}",
        checkpoint.entities_total,
        checkpoint.entities_done,
        "entities",
    ) as bar:
        for batch in cleaner.batches(fetch, result):
            if found is None:
                index_entities(index, alias, batch, result)
            else:
                index_batch(index, found, alias, batch, result, in_place=in_place[0])
            checkpoint.last_added_id = batch[-1][0]
            checkpoint.entities_done += len(batch)
            checkpoint.save(update_fields=["last_added_id", "entities_done", "changed"])
            bar.update(len(batch))
    if result.status == DONE:
        checkpoint.done = True
        checkpoint.save(update_fields=["done", "changed"])


# --- repair ------------------------------------------------------------------------------------


def repair(cleaner: PassRunner, index: Index, alias: str, result: PassResult) -> None:
    start_record(result)
    source = index.source
    # Counting a big table takes a while: only for a progress bar someone watches.
    total = entity_table.count(source, alias) if cleaner.progress else None

    found = extraction(index, alias)

    def fetch(previous: list[Any] | None) -> list[Any]:
        bound = None if previous is None else (previous[-1][2], previous[-1][0])
        if found is not None:
            return json_index.read_newest_first(index, found, alias, bound, cleaner.batch_size)
        return entity_table.newest_first(source, alias, bound, cleaner.batch_size)

    with cleaner.bar(f"repair {index.name} {alias}", total, 0, "entities") as bar:
        for batch in cleaner.batches(fetch, result):
            _repair_entities(index, alias, batch, result)
            bar.update(len(batch))


def _repair_entities(
    index: Index, alias: str, batch: list[EntityRow] | list[ServerRow], result: PassResult
) -> None:
    """Repair a batch: rows the server read (``(added_id, id, updated, python, values)``), or
    ``(added_id, id, updated, body)`` decoded here."""
    if batch and isinstance(batch[0], ServerRow):
        repair_batch(index, alias, cast(list[ServerRow], batch), result)
        return
    properties: dict[bytes, Any] = {}
    seen: dict[bytes, Version] = {}
    for added_id, entity_id, updated, body in cast(list[EntityRow], batch):
        decoded = decode(alias, entity_id, body, result)
        if decoded is not None:
            properties[entity_id] = decoded
            seen[entity_id] = (added_id, updated)
    diff = compare(index, properties)
    apply_diff(index, alias, diff, seen, result)


# --- sweep -------------------------------------------------------------------------------------


def sweep(cleaner: PassRunner, index: Index, alias: str, result: PassResult) -> None:
    start_record(result)
    total = counts.exact_count(alias, index.name) if cleaner.progress else None

    def fetch(previous: list[tuple[Any, ...]] | None) -> list[tuple[Any, ...]]:
        last = None if previous is None else previous[-1]
        return index_table.after(index, alias, last, cleaner.batch_size)

    with cleaner.bar(f"sweep {index.name} {alias}", total, 0, "rows") as bar:
        for batch in cleaner.batches(fetch, result):
            _sweep_rows(index, alias, batch, result)
            bar.update(len(batch))


def _nested() -> Candidates:
    return defaultdict(lambda: defaultdict(set))


def _sweep_rows(index: Index, alias: str, batch: list[tuple[Any, ...]], result: PassResult) -> None:
    found = current_rows(index, {row[-1] for row in batch}, result)
    implied: dict[bytes, set[tuple[Any, ...]] | None] = {}
    orphans, stale = _nested(), _nested()
    rehome: dict[str, list[Row]] = defaultdict(list)
    seen: dict[bytes, Version] = {}
    misplaced_orphans, misplaced_other = [], []
    for row in batch:
        values, entity_id = tuple(row[:-1]), row[-1]
        entity_alias = bucket_map.alias_for(entity_id)
        home = index_table.home(index, values)
        if entity_id not in found:
            if home == alias:
                orphans[entity_alias][entity_id].add((index, values))
            else:
                misplaced_orphans.append(row)
            continue
        if entity_id not in implied:
            added_id, updated, implied[entity_id] = found[entity_id]
            seen[entity_id] = (added_id, updated)
        rows = implied[entity_id]
        if home != alias:
            # Wrong shard by the map (its buckets moved): deleted once the entity's row, if it
            # still needs one, exists where queries look for it, and only if this shard's own
            # bucket table agrees (repairs.delete_on: the map may be older than a flip).
            misplaced_other.append(row)
            if rows is not None and values in rows:
                rehome[entity_alias].append((index, values, entity_id))
        elif rows is not None and values not in rows:
            stale[entity_alias][entity_id].add((index, values))
        # rows is None: undecodable body; its rows are left alone (reported)
    for entity_alias, candidates in orphans.items():
        result.orphans_removed += stale_rows.remove_stale(entity_alias, candidates, index.source)
    for entity_alias, candidates in stale.items():
        result.stale_removed += stale_rows.remove_stale(entity_alias, candidates, index.source)
    for entity_alias, rows_to_add in rehome.items():
        result.inserted += insert_checked(index, entity_alias, rows_to_add, seen, result)
    result.orphans_removed += delete_on(index, alias, misplaced_orphans)
    result.stale_removed += delete_on(index, alias, misplaced_other)
