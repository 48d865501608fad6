"""``Entity.objects.all()``: every entity on every shard, like a Django queryset.

The order is documented and stable: shard after shard, in the order of ``SCHEMALESS["SHARDS"]``,
and within a shard by ``added_id`` (the order entities were first inserted there). Like a
``QuerySet`` it is lazy; slicing (``[:n]``, ``[n:m]``) gives a new lazy one, an integer index
or a step evaluates; ``len()`` and ``bool()`` evaluate and cache the results, and ``count()``,
``exists()`` and ``first()`` read only what they need (``count()`` is ``COUNT(*)`` per shard,
except while a bucket move has left copies: then it counts each entity where it is owned).
``iterator(chunk_size)`` walks in chunks by keyset without caching, for large stores, and
``page(after=cursor, size=n)`` reads one page of that order (a signed cursor of its last entity:
shard, ``added_id``, id), as an index query's ``page()`` does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..config.indexes import ENTITIES, KIND_PROPERTY
from ..exceptions import InvalidQuery
from ..sql.values import datetime_converter
from ..tables import buckets
from ..tables import entities as entity_table
from ..tables.buckets import retrying_stale
from ..topology import bucket_map, shards
from ..topology.bucket_map import moves_unfinished
from ..values import bounds
from ..values.bucket_hash import bucket_of
from . import cursors
from .asyncapi import AsyncChunks, AsyncResults, sync_only
from .indexquery import Page
from .results import CachedResults

# The largest page() size, as for an index query.
MAX_PAGE = 1000


class AllEntities(AsyncResults, AsyncChunks, CachedResults):
    """Every entity, shard after shard, by ``added_id`` within a shard (see the module docs).

    ``kind``: only the entities of that kind (docs/kinds.md); they are told apart by their
    bodies, so counting and skipping then read every entity."""

    def __init__(
        self,
        model: Any,
        chunk_size: int = 500,
        start: int = 0,
        stop: int | None = None,
        kind: str | None = None,
    ) -> None:
        self.model = model
        self.kind = kind
        self.chunk_size = chunk_size
        self._start = start
        self._stop = stop
        self._cache: list[Any] | None = None

    def __repr__(self) -> str:
        return f"<AllEntities [{self._start}:{'' if self._stop is None else self._stop}]>"

    # --- like a QuerySet --------------------------------------------------------------------

    def __getitem__(self, item: int | slice) -> Any:
        if not isinstance(item, int | slice):
            raise TypeError(
                f"AllEntities indices must be integers or slices, not {type(item).__name__}."
            )
        if (isinstance(item, int) and item < 0) or (
            isinstance(item, slice)
            and (
                (item.start is not None and item.start < 0)
                or (item.stop is not None and item.stop < 0)
            )
        ):
            raise ValueError("Negative indexing is not supported.")
        if self._cache is not None:
            return self._cache[item]
        if isinstance(item, slice):
            start = self._start + (item.start or 0)
            stop = None if item.stop is None else self._start + item.stop
            if self._stop is not None:
                stop = self._stop if stop is None else min(stop, self._stop)
            sliced = AllEntities(self.model, self.chunk_size, start, stop, self.kind)
            return list(sliced)[:: item.step] if item.step else sliced
        at = self._start + item
        found = [] if self._stop is not None and at >= self._stop else list(self[item : item + 1])
        if not found:
            raise IndexError("AllEntities index out of range")
        return found[0]

    def _all_results(self) -> Iterator[Any]:
        return self.iterator()

    @sync_only
    def count(self) -> int:
        """The number of entities (of this slice): ``COUNT(*)`` per shard, nothing fetched."""
        if self._cache is not None:
            return len(self._cache)
        if self.kind is not None or bucket_map.current().moving or moves_unfinished():
            # Copies of moving entities are on two shards: count each where it is owned; a
            # kind's entities are told from others by their bodies.
            return retrying_stale(lambda: sum(1 for _ in self.iterator()))
        total = sum(self._shard_counts().values())
        last = total if self._stop is None else min(total, self._stop)
        return max(0, last - self._start)

    @sync_only
    def exists(self) -> bool:
        if self._cache is not None:
            return bool(self._cache)
        return self.first() is not None

    @sync_only
    def first(self) -> Any | None:
        return next(iter(self[:1]), None)

    @sync_only
    def page(self, after: str | None = None, size: int = 30) -> Any:
        """One :class:`~.indexquery.Page` of ``size`` entities after ``after`` (a cursor from
        the page before; None: the first page). Entities inserted meanwhile never cause a
        duplicate or a skip of an entity that existed when the reader started."""
        if self._start or self._stop is not None:
            raise InvalidQuery("page() works on an unsliced all(); use size= for the page size")
        if not bounds.whole(size, 1, MAX_PAGE):
            raise InvalidQuery(f"page size must be an int from 1 to {MAX_PAGE}, not {size!r}")
        aliases = shards.shard_aliases()
        kind = () if self.kind is None else (self.kind,)
        fingerprint = cursors.fingerprint("all", aliases, *kind)
        position, last = (0, 0) if after is None else cursors.decode(after, fingerprint, 3)[:2]
        found = retrying_stale(lambda: self._from(int(position), int(last), size + 1))
        entities = [entity for _position, entity in found[:size]]
        cursor = None
        if len(found) > size:
            at, entity = found[size - 1]
            cursor = cursors.encode(fingerprint, [at, entity.added_id, bytes(entity.row_id)])
        return Page(entities=entities, next_cursor=cursor)

    def _from(self, position: int, last: int, wanted: int) -> list[tuple[int, Any]]:
        """``wanted`` entities (each with its shard's position) after ``added_id`` ``last`` of
        the shard at ``position``, in the order of the walk."""
        used = bucket_map.current()
        copies = bool(used.moving) or moves_unfinished()
        build = self.model.row_builder()
        found: list[tuple[int, Any]] = []
        for at, alias in enumerate(shards.shard_aliases()):
            if at < position:
                continue
            convert = datetime_converter(shards.connection(alias))
            after = last if at == position else 0
            while len(found) < wanted:
                limit = wanted - len(found)
                with shards.errors_named(alias):
                    rows = entity_table.by_added_id(alias, after, limit)
                buckets.confirm_read(alias, used)
                for added_id, key, updated, body in rows:
                    key = bytes(key)
                    if not copies or used.owners[bucket_of(key, used.buckets)] == alias:
                        entity = build(alias, added_id, key, convert(updated), bytes(body))
                        if self._kept(entity):
                            found.append((at, entity))
                if len(rows) < limit:
                    break
                after = rows[-1][0]
            if len(found) >= wanted:
                break
        return found[:wanted]

    @sync_only
    def iterator(self, chunk_size: int | None = None) -> Iterator[Any]:
        """The entities in chunks of ``chunk_size`` read by keyset, without caching them.

        While a bucket move has copies of some entities on two shards, each is taken only
        from the shard that owns it, and slices skip in Python rather than by ``OFFSET``. A
        bucket move that flips while the iterator runs makes it raise ``StaleRead`` (iterating
        the query itself starts again instead)."""
        size = self.chunk_size if chunk_size is None else chunk_size
        if not bounds.whole(size):
            raise ValueError(f"Chunk size must be strictly positive, not {size!r}.")
        wanted = None if self._stop is None else self._stop - self._start
        if wanted is not None and wanted <= 0:
            return
        used = bucket_map.current()
        copies = bool(used.moving) or moves_unfinished()
        # Skipping in Python: per entity, where copies or other kinds must not be counted.
        by_entity = copies or self.kind is not None
        skip = self._start
        counts = self._shard_counts() if skip and not by_entity else {}
        build = self.model.row_builder()
        owners, total = used.owners, used.buckets
        for alias in shards.shard_aliases():
            if counts and counts[alias] <= skip:
                skip -= counts[alias]
                continue
            convert = datetime_converter(shards.connection(alias))
            after = 0
            while True:
                limit = size if wanted is None else min(size, wanted)
                with shards.errors_named(alias):
                    rows = entity_table.by_added_id(alias, after, limit, 0 if by_entity else skip)
                buckets.confirm_read(alias, used)
                if not by_entity:
                    skip = 0
                taken = 0
                for added_id, key, updated, body in rows:
                    key = bytes(key)
                    entity = build(alias, added_id, key, convert(updated), bytes(body))
                    if by_entity:
                        if copies and owners[bucket_of(key, total)] != alias:
                            continue
                        if not self._kept(entity):
                            continue
                        if skip:
                            skip -= 1
                            continue
                    taken += 1
                    yield entity
                    if wanted is not None and taken >= wanted:
                        return
                if wanted is not None:
                    wanted -= taken
                if len(rows) < limit:
                    break
                after = rows[-1][0]

    def _kept(self, entity: Any) -> bool:
        return self.kind is None or entity.body_properties().get(KIND_PROPERTY) == self.kind

    def _shard_counts(self) -> dict[str, int]:
        counts = {}
        for alias in shards.shard_aliases():
            with shards.errors_named(alias):
                counts[alias] = entity_table.count(ENTITIES, alias)
        return counts
