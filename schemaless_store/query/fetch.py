"""Entities by id: one ``SELECT`` for one, one ``IN (...)`` query per shard for many.

Entities are built with the model's ``row_builder()`` (the model is given by its manager, so
the read path never imports the Django face above it).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from ..cache import entity_cache
from ..cache.entity_cache import Row as CachedRow
from ..config import conf
from ..sql import dialects
from ..sql.values import datetime_converter
from ..tables import buckets
from ..tables import entities as entity_table
from ..topology import bucket_map, replicas, shards
from ..values import entity_ids
from ..values.bucket_hash import bucket_of
from .pool import scatter

# From this many ids over several shards, fetch_by_ids reads the shards at once; for fewer the
# hand-off to a thread costs more than it saves (docs/performance-history.md).
PARALLEL_FETCH_MIN = 64


class EntityFetcher:
    """What an entity query turns ids into: the entities (:class:`~.indexquery.IndexQuery`'s
    fetcher). A pinned page may join them to its index scan (``join_entities``)."""

    join_entities = True

    def __init__(self, model: Any) -> None:
        self.model = model

    def fetch(self, ids: Iterable[bytes]) -> dict[bytes, Any]:
        return fetch_by_ids(self.model, ids)


def fetch_by_ids(model: Any, ids: Iterable[bytes]) -> dict[bytes, Any]:
    """``{id bytes: entity}`` for the ids that exist; one ``IN`` query per shard and batch.

    Many ids on several MariaDB shards (at least :data:`PARALLEL_FETCH_MIN`, outside any
    transaction) are read at once, the first shard in this thread and each other one on a
    scatter thread; fewer are read one shard after the other, where handing work to a thread
    costs more than it saves.
    """
    wanted = list(dict.fromkeys(ids))
    return buckets.retrying_stale(lambda: _fetch_by_ids(model, wanted))


def _fetch_by_ids(model: Any, ids: list[bytes]) -> dict[bytes, Any]:
    used = bucket_map.current()
    owners, total = used.owners, used.buckets
    by_alias: dict[str, list[bytes]] = defaultdict(list)
    for entity_id in ids:
        by_alias[owners[bucket_of(entity_id, total)]].append(entity_id)
    found: dict[bytes, Any] = {}
    # Where each shard is read (a replica or the primary) is this thread's choice.
    source = {alias: replicas.reader(alias) for alias in by_alias}
    if len(by_alias) > 1 and sum(map(len, by_alias.values())) >= PARALLEL_FETCH_MIN:
        conns = [shards.connection(alias) for alias in by_alias]
        if all(dialects.of(c).parallel_connections and not c.in_atomic_block for c in conns):
            parts = scatter(
                lambda item: fetch_shard(model, item[0], source[item[0]], item[1], used),
                by_alias.items(),
            )
            for part in parts:
                found.update(part)
            return found
    for alias, alias_ids in by_alias.items():
        found.update(fetch_shard(model, alias, source[alias], alias_ids, used))
    return found


def fetch_shard(
    model: Any, alias: str, source: str, ids: list[bytes], used: bucket_map.BucketMap | None
) -> dict[bytes, Any]:
    """The entities among ``ids`` that live on ``alias``, read from ``source`` (``alias`` or
    one of its replicas, :func:`..topology.replicas.reader`'s choice in the calling thread);
    the read is confirmed against the map ``used`` that routed them
    (:func:`~..tables.buckets.confirm_read`)."""
    build = model.row_builder()

    def read(where: str) -> dict[bytes, Any]:
        convert = datetime_converter(shards.connection(where))
        found: dict[bytes, Any] = {}
        for added_id, row_id, updated, body in entity_table.select_by_ids(where, ids):
            row_id = bytes(row_id)
            found[row_id] = build(alias, added_id, row_id, convert(updated), bytes(body))
        return found

    found = read(alias) if source == alias else replicas.read_with_fallback(alias, source, read)
    if used is not None:
        buckets.confirm_read(alias, used)
    return found


def get_one(model: Any, entity_id: Any) -> Any | None:
    """The entity with this id, or None: one ``SELECT`` on its shard (or one cache read)."""
    key = entity_ids.entity_id_bytes(entity_id)
    if conf.get().cache is not None:  # _read_through reads the shard if the cache is off now
        return _read_through(model, [key], lambda ids: _one_found(model, ids[0])).get(key)
    try:  # retrying_stale's first attempt, without its closure and clock: the usual case
        return _get_one(model, key)
    except bucket_map.StaleRead:
        pass  # confirm_read read the map again: the retries go by the new one
    return buckets.retrying_stale(lambda: _get_one(model, key))


def _one_found(model: Any, key: bytes) -> dict[bytes, Any]:
    """A miss of ``get``: ``_get_one``'s ``SELECT`` (``= %s``, no ``IN`` list), as a dict."""
    entity = _get_one(model, key)
    return {} if entity is None else {key: entity}


def _get_one(model: Any, key: bytes) -> Any | None:
    used = bucket_map.current()
    alias = used.owners[bucket_of(key, used.buckets)]
    source = replicas.reader(alias)
    if source == alias:  # no replica chosen (the usual case): no fallback to wrap it in
        conn = shards.connection(alias)
        row = entity_table.select_one(alias, key, conn)
    else:

        def read(where: str) -> tuple[Any, Any]:
            conn = shards.connection(where)
            return entity_table.select_one(where, key, conn), conn

        row, conn = replicas.read_with_fallback(alias, source, read)
    buckets.confirm_read(alias, used)
    if row is None:
        return None
    return model.row_builder()(alias, row[0], key, datetime_converter(conn)(row[2]), bytes(row[3]))


def get_many(model: Any, ids: Iterable[Any]) -> dict[uuid.UUID, Any]:
    """The entities among ``ids`` that exist, by id (the caller's UUID objects where it gave
    UUIDs); read through the entity cache when there is one."""
    wanted = {entity_ids.entity_id_bytes(i): i if type(i) is uuid.UUID else None for i in ids}
    if conf.get().cache is not None:
        found = _read_through(model, list(wanted), lambda ids: fetch_by_ids(model, ids))
    else:
        found = fetch_by_ids(model, wanted)
    return {key or uuid.UUID(bytes=i): found[i] for i, key in wanted.items() if i in found}


def _read_through(
    model: Any, ids: list[bytes], read: Callable[[list[bytes]], dict[bytes, Any]]
) -> dict[bytes, Any]:
    """``read(ids)`` with the entity cache in front (:mod:`..cache.entity_cache`): hits that name
    the owner this process's map gives, the database for the rest, which then fill the cache.
    Reads inside a transaction on a shard they touch neither use nor fill it."""
    used = bucket_map.current()
    owners, total = used.owners, used.buckets
    owner = {key: owners[bucket_of(key, total)] for key in ids}
    through = entity_cache.lookup()
    if through is None or any(
        shards.connection(alias).in_atomic_block for alias in set(owner.values())
    ):
        return buckets.retrying_stale(lambda: read(ids))
    build = model.row_builder()
    found: dict[bytes, Any] = {}
    hits = through.find(ids, owner.__getitem__)
    for key, row in hits.items():
        if row.exists:
            found[key] = build(row.alias, row.added_id, key, row.updated, row.body)
    missed = [key for key in ids if key not in hits]
    if missed:
        # Fills come from the primaries: a lagging replica's row would be filled under a token
        # taken after the write's invalidation, and served until the entry expires.
        with replicas.from_primary():
            got = buckets.retrying_stale(lambda: read(missed))
        found.update(got)
        through.fill((key, _cache_row(key, got.get(key), owner.__getitem__)) for key in missed)
    return found


def _cache_row(key: bytes, entity: Any, owner_of: Callable[[bytes], str]) -> CachedRow:
    if entity is None:
        return CachedRow(owner_of(key), False)
    return CachedRow(
        entity._state.db, True, entity.added_id, entity.row_updated, bytes(entity.row_body)
    )
