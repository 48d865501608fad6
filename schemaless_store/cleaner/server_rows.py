"""The cleaner's batches with index rows the server reads out of JSON bodies (issue 45;
:mod:`..tables.json_index`): the backfill's and the repair's.

Used where the store writes JSON bodies (``SCHEMALESS["CODEC"]`` is a
:class:`~schemaless_store.values.codec.JsonCodec`), the shard's server has the JSON functions
(MariaDB) and it can compute every column of the index. Elsewhere, and for every entity the
server leaves to Python (a tagged value, a list, a MessagePack body during a rewrite, a value
too long...), the batch is today's: bodies decoded here (:func:`.repairs.index_entities`).

A backfill batch is one of two:

- *local*: the shard's index writer serves every bucket (its fence snapshot says so), so every
  row belongs in the index table beside the entities: the server writes them, one
  ``INSERT ... SELECT`` per chunk of ids (no value crosses the network);
- *streamed*: the rows may belong on other shards: they come back as ``(values, id)`` and are
  routed and inserted as today's rows are (no body crosses the network).

Either way the writes are checked as today's are: the entities whose version changed between
the batch's read and the check hand their rows to the locked re-check (``remove_stale``).
"""

from __future__ import annotations

import weakref
from collections import defaultdict
from functools import partial
from typing import Any

from ..config import conf
from ..config.indexes import Index
from ..exceptions import IndexValueError
from ..guards import fence
from ..tables import entities as entity_table
from ..tables import index_rows as index_table
from ..tables import json_index
from ..tables.index_rows import Row
from ..tables.json_index import Extraction, ServerRow
from ..topology import bucket_map, shards
from ..values.codec import JsonCodec
from ..writes import stale_rows
from .consistency import Diff, compare_rows
from .records import PassResult
from .repairs import (
    Version,
    apply_diff,
    decode,
    implied,
    index_entities,
    insert_checked,
    insert_chunk,
    write,
)

# Per index object (a redeclared index is another object): its expressions.
_EXTRACTIONS: weakref.WeakKeyDictionary[Index, Extraction] = weakref.WeakKeyDictionary()


def extraction(index: Index, alias: str) -> Extraction | None:
    """The server's expressions for ``index`` on ``alias``; None where the batch is today's."""
    if not isinstance(conf.get().codec, JsonCodec) or not shards.dialect(alias).json_index_rows:
        return None
    if not json_index.supported(index):
        return None
    found = _EXTRACTIONS.get(index)
    if found is None:
        found = _EXTRACTIONS[index] = Extraction(index)
    return found


def local(index: Index, alias: str) -> bool:
    """Whether every row of ``index`` belongs on ``alias``: its index writer's snapshot serves
    every bucket (and a unique index is not one: its claims are made one by one, to report
    a conflict)."""
    if index.unique:
        return False
    conn = shards.index_connection(alias)
    return not fence.refused(conn, range(bucket_map.current().buckets))


# --- backfill ----------------------------------------------------------------------------------


def fetch_batch(
    index: Index, found: Extraction, alias: str, last: int, upto: int, limit: int
) -> list[ServerRow]:
    return json_index.read_batch(index, found, alias, last, upto, limit)


def index_batch(
    index: Index,
    found: Extraction,
    alias: str,
    batch: list[ServerRow],
    result: PassResult,
    *,
    in_place: bool,
) -> None:
    """Index a backfill batch the server read (``in_place``: by ``INSERT ... SELECT``)."""
    python = [row.added_id for row in batch if row.python]
    if python:
        index_entities(index, alias, json_index.bodies(index.source, alias, python), result)
    served = [row for row in batch if not row.python]
    if not in_place:
        _stream(index, alias, served, result)
        return
    served = [row for row in served if row.values is not None]  # the entities with a row
    if not served:
        return
    written = 0
    step = insert_chunk()
    refused: list[ServerRow] = []  # a move took buckets away since the batch was read
    for start in range(0, len(served), step):
        chunk = served[start : start + step]
        ids = [row.added_id for row in chunk]
        count = write(partial(json_index.insert_select, index, found, alias, ids, fence.refused))
        if count is None:
            refused += chunk
        else:
            written += count
    left = {row.entity_id for row in refused}
    seen: dict[bytes, Version] = {
        r.entity_id: (r.added_id, r.updated) for r in served if r.entity_id not in left
    }
    result.inserted += written - recheck_changed(index, alias, seen)
    if refused:  # streamed instead: routed to where their buckets are now
        _stream(index, alias, refused, result)


def _stream(index: Index, alias: str, served: list[ServerRow], result: PassResult) -> None:
    rows: list[Row] = [(index, r.values, r.entity_id) for r in served if r.values is not None]
    read_at = {r.entity_id: (r.added_id, r.updated) for r in served if r.values is not None}
    result.inserted += insert_checked(index, alias, rows, read_at, result)


def recheck_changed(index: Index, alias: str, seen: dict[bytes, Version]) -> int:
    """After an ``INSERT ... SELECT``: the entities changed (or gone) since the batch read them
    may have had a row written from a version a writer has replaced since, and removed the
    rows of before our insert landed. Every row of theirs goes to the locked re-check, which
    keeps the ones their stored state implies. Returns the rows it removed."""
    now = entity_table.versions(index.source, alias, [added_id for added_id, _ in seen.values()])
    changed = [key for key, version in seen.items() if now.get(key) != version]
    if not changed:
        return 0
    candidates: dict[bytes, set[tuple[Index, tuple[Any, ...]]]] = defaultdict(set)
    for values, entity_id in index_table.of_entities(index, changed):
        candidates[entity_id].add((index, values))
    return stale_rows.remove_stale(alias, candidates, index.source) if candidates else 0


# --- repair ------------------------------------------------------------------------------------


def repair_batch(index: Index, alias: str, batch: list[ServerRow], result: PassResult) -> None:
    """Repair the entities of a batch the server read: missing rows added (checked as a
    backfill's are), stale ones removed under the entity's lock."""
    expected: dict[bytes, set[tuple[Any, ...]]] = {}
    seen: dict[bytes, Version] = {}
    python = [row.added_id for row in batch if row.python]
    unindexable: list[bytes] = []
    if python:
        for added_id, entity_id, updated, body in json_index.bodies(index.source, alias, python):
            properties = decode(alias, entity_id, body, result)
            if properties is None:
                continue
            seen[entity_id] = (added_id, updated)
            try:
                expected[entity_id] = index.rows_for(properties)
            except IndexValueError:  # the entity cannot be in this index: no row of it is
                unindexable.append(entity_id)
                expected[entity_id] = set()
    for row in batch:
        if not row.python:
            seen[row.entity_id] = (row.added_id, row.updated)
            expected[row.entity_id] = set() if row.values is None else {row.values}
    diff: Diff = compare_rows(index, expected, unindexable)
    apply_diff(index, alias, diff, seen, result)


# --- sweep -------------------------------------------------------------------------------------


def current_rows(
    index: Index, keys: set[bytes], result: PassResult
) -> dict[bytes, tuple[int, Any, set[tuple[Any, ...]] | None]]:
    """``{key: (added_id, updated, the rows it implies)}`` of the entities among ``keys`` that
    exist, on the shards that own them (read without locks); the rows are None for a corrupt
    body (reported). The server reads them where it can, else the bodies are decoded here."""
    by_alias: dict[str, list[bytes]] = defaultdict(list)
    for key in keys:
        by_alias[bucket_map.alias_for(key)].append(key)
    out: dict[bytes, tuple[int, Any, set[tuple[Any, ...]] | None]] = {}
    for alias, alias_keys in by_alias.items():
        found = extraction(index, alias)
        if found is None:
            bodies = [
                (added_id, key, updated, body)
                for key, (added_id, updated, body) in entity_table.current(
                    index.source, alias_keys
                ).items()
            ]
        else:
            python = []
            for row in json_index.current(index, found, alias, alias_keys):
                if row.python:
                    python.append(row.added_id)
                else:
                    rows = set() if row.values is None else {row.values}
                    out[row.entity_id] = (row.added_id, row.updated, rows)
            bodies = json_index.bodies(index.source, alias, python) if python else []
        for added_id, key, updated, body in bodies:
            out[key] = (added_id, updated, implied(index, key, body, result))
    return out
