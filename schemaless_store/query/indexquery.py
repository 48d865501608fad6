"""``filter_index(...)``: a lazy query over the one index that serves it (docs/design.md#read-path).

Evaluating it:

1. the planner picks the index (:mod:`.planner`);
2. index rows are read from the one shard that owns the ``shard_on`` value when the conditions
   pin it, else from every shard, merged in order (:mod:`.scan`); rows come in batches
   continued by keyset, so a limit is pushed down and nothing reads the whole table;
3. the entities of a batch are fetched, one ``IN (...)`` query per entity shard (the query's
   *fetcher*: :class:`~.fetch.EntityFetcher`, or a cell column's);
4. a row yields its entity only if the entity exists, the row is one the entity's *current*
   properties imply, and the row's values meet every condition: a stale index row never yields
   an entity.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

from ..config.indexes import KIND_PROPERTY, Index
from ..exceptions import InvalidQuery, NoIndexForQuery
from ..tables.buckets import retrying_stale
from ..topology import bucket_map, shards
from ..values import bounds
from . import cursors
from .asyncapi import AsyncResults, sync_only
from .conditions import ColumnConditions, parse_conditions
from .planner import Plan, choose_index, plan
from .results import CachedResults, check_index
from .scan import REFUTED, ShardScan, merged
from .servercheck import pinned_buckets, server_checks

# Entities fetched per batch when iterating a whole query.
ITERATION_BATCH = 500
# The largest page, and so the largest batch of a slice (a page reads its size + 1 rows).
MAX_PAGE = 1000


@dataclass
class Page:
    """A page of results and the cursor of the next one (None on the last page)."""

    entities: list[Any]
    next_cursor: str | None

    @property
    def has_next(self) -> bool:
        return self.next_cursor is not None

    def __iter__(self) -> Iterator[Any]:
        return iter(self.entities)

    def __len__(self) -> int:
        return len(self.entities)


class IndexQuery(AsyncResults, CachedResults):
    """A lazy query over one index. Iterate it, slice it, or call ``first``/``count``/``ids``,
    ``page`` or ``explain``.

    ``fetcher`` turns entity ids into results (it has ``fetch(ids)`` and ``join_entities``);
    ``column`` is None for a query over entities, or the cell column whose indexes it uses;
    ``kind`` the kind whose indexes it uses (None: the indexes declared on no kind).
    """

    def __init__(
        self,
        conditions: dict[str, Any],
        fetcher: Any,
        column: str | None = None,
        kind: str | None = None,
    ) -> None:
        self._raw = dict(conditions)
        self.fetcher = fetcher
        self.column = column
        self.kind = kind
        # A kind's query may have none: ``Entry.objects.filter_index().order_by("published")``
        # (the kind is pinned by its indexes).
        self.conditions = parse_conditions(conditions) if conditions or kind is None else []
        self.order: str | None = None
        self.descending = False
        self.offset = 0
        self.limit: int | None = None
        self.building_ok = False
        self._index: Index | None = None
        self._bound: ColumnConditions | None = None
        self._cache: list[Any] | None = None

    # --- building ---------------------------------------------------------------------------

    def _clone(self, replan: bool = False) -> IndexQuery:
        """A copy without results; ``replan`` when the index may change (ordering, states)."""
        clone = IndexQuery.__new__(IndexQuery)
        clone.__dict__.update(self.__dict__)
        clone._cache = None
        if replan:
            clone._index = None
            clone._bound = None
        return clone

    def order_by(self, field: str) -> IndexQuery:
        """Order by an indexed property: ``"published"`` or ``"-published"``. Like the
        conditions, the ordering names a property every answer has (see :mod:`.planner`)."""
        if not isinstance(field, str) or not field.lstrip("-"):
            raise InvalidQuery(f"order_by() takes a property name, not {field!r}")
        clone = self._clone(replan=True)
        clone.descending = field.startswith("-")
        clone.order = field.lstrip("-")
        return clone

    def allow_building(self) -> IndexQuery:
        """Accept an index that is still being backfilled (results may miss older entities)."""
        clone = self._clone(replan=True)
        clone.building_ok = True
        return clone

    def __getitem__(self, item: int | slice) -> Any:
        """As a Django ``QuerySet``: ``q[n]`` is one entity (``IndexError`` past the end),
        ``q[n:m]`` a lazy query with the limit pushed down, a slice with a step a list; negative
        bounds raise (``InvalidQuery``, a ``ValueError``)."""
        check_index(item)
        if self._cache is not None:
            return self._cache[item]
        if isinstance(item, int):
            results = list(self[item : item + 1])
            if not results:
                raise IndexError("query index out of range")
            return results[0]
        if item.step is not None:
            return list(self[item.start : item.stop])[:: item.step]
        return self._sliced(item.start or 0, item.stop)

    def _sliced(self, start: int, stop: int | None) -> IndexQuery:
        """A lazy copy limited to ``[start:stop]`` of this query's results."""
        clone = self._clone()
        clone.offset = self.offset + start
        if stop is not None:
            stop_abs = self.offset + stop
            if self.limit is not None:
                stop_abs = min(stop_abs, self.offset + self.limit)
            clone.limit = max(0, stop_abs - clone.offset)
        elif self.limit is not None:
            clone.limit = max(0, self.limit - start)
        return clone

    # --- the plan ---------------------------------------------------------------------------

    @property
    def index(self) -> Index:
        """The index that answers the query (chosen on first use); :class:`NoIndexForQuery`
        if none can (see :mod:`.planner`), :class:`IndexNotReady` if it is still building."""
        if self._index is None:
            try:
                self._index = choose_index(
                    self.conditions,
                    self.order,
                    self.building_ok,
                    self.column,
                    self.descending,
                    kind=self.kind,
                )
            except NoIndexForQuery:
                if not self._as_kind_query():
                    raise
                return self.index
        return self._index

    def _as_kind_query(self) -> bool:
        """``filter_index(kind="entry", ...)`` that no plain index serves, made the query of
        kind "entry" over the rest when one of that kind's indexes serves it (the operators'
        admin search, code written before the kind): True if it was."""
        found = [c for c in self.conditions if c.prop == KIND_PROPERTY]
        if self.kind is not None or self.column is not None or len(found) != 1:
            return False
        if found[0].lookup != "exact" or not isinstance(found[0].value, str):
            return False
        rest = [c for c in self.conditions if c.prop != KIND_PROPERTY]
        if not rest and self.order is None:
            return False
        try:
            choose_index(
                rest, self.order, self.building_ok, None, self.descending, kind=found[0].value
            )
        except NoIndexForQuery:
            return False
        self.conditions, self.kind = rest, found[0].value
        return True

    @property
    def bound(self) -> ColumnConditions:
        """The conditions as the chosen index's column values (:class:`InvalidQuery` for a
        value its column refuses)."""
        index = self.index
        if self._bound is None or self._bound.index is not index:
            self._bound = ColumnConditions(self.conditions, index, self.order)
        return self._bound

    def plan(self) -> Plan:
        """The planner's verdict on every declared index, whether one serves or not."""
        found = self._plan()
        if found.index is None and found.problem == "no_index" and self._as_kind_query():
            found = self._plan()
        return found

    def _plan(self) -> Plan:
        return plan(
            self.conditions,
            self.order,
            descending=self.descending,
            allow_building=self.building_ok,
            column=self.column,
            kind=self.kind,
        )

    def explain(self) -> str:
        """How the query would run, as text (like Django's ``QuerySet.explain()``): the chosen
        index, the shard it is pinned to or the shards it scatters over, and why each other
        declared index was rejected. A query no index serves is explained, not raised."""
        found = self.plan()
        if found.index is None:
            return found.explain_refusal()
        bound = aliases = None
        try:
            bound = ColumnConditions(self.conditions, found.index, self.order)
            aliases = bound.target_aliases()
        except InvalidQuery as exc:
            problem = str(exc)
        else:
            problem = ""
        positions = None if bound is None else bound.sort_positions
        return found.explain_choice(aliases, list(shards.shard_aliases()), positions, problem)

    # --- evaluating -------------------------------------------------------------------------

    def _all_results(self) -> Iterator[Any]:
        return self._results()

    def __repr__(self) -> str:
        return f"<IndexQuery {self._raw!r} on {self.index.name}>"

    @sync_only
    def first(self) -> Any | None:
        return next(iter(self[:1]), None)

    @sync_only
    def exists(self) -> bool:
        return self.first() is not None

    @sync_only
    def count(self) -> int:
        """The number of matching entities (after the re-check, so it reads every match)."""
        if self._cache is not None:
            return len(self._cache)
        return retrying_stale(lambda: sum(1 for _ in self._results()))

    @sync_only
    def ids(self) -> list[uuid.UUID]:
        """Entity ids from the index rows alone: no entity is fetched, nothing is re-checked,
        so a stale row can show up here (use it for prefetching, not for answers)."""
        return retrying_stale(self._ids)

    def _ids(self) -> list[uuid.UUID]:
        seen: dict[bytes, None] = {}
        need = None if self.limit is None else self.offset + self.limit
        for _key, row in self._index_rows(batch=self._batch_size()):
            seen.setdefault(row[-1], None)
            if need is not None and len(seen) >= need:
                break
        picked = list(seen)[self.offset : need]
        return [uuid.UUID(bytes=i) for i in picked]

    def _batch_size(self) -> int:
        if self.limit is None:
            return ITERATION_BATCH
        # The refill loop reads further rows when stale ones are dropped: no over-fetch needed.
        return max(1, min(MAX_PAGE + 1, self.offset + self.limit))

    def _results(self) -> Iterator[Any]:
        if self.limit == 0:
            return
        stop = None if self.limit is None else self.offset + self.limit
        for _key, entity in islice(self._matching_keyed(), self.offset, stop):
            yield entity

    def _matching_keyed(self, after: tuple[Any, ...] | None = None) -> Iterator[tuple[Any, Any]]:
        """(sort key of the row, entity) for every match, in order, after the ``after`` key."""
        index, bound = self.index, self.bound
        batch = self._batch_size()
        seen: set[bytes] = set()
        # The scan stops joining after a batch whose entities mostly live elsewhere (not
        # co-located, docs/placement.md): then the join costs more than it saves.
        joined: dict[bytes, Any] | None = {} if self.fetcher.join_entities else None
        # The server's word on rows (True: the entity implies it), when it re-checks them.
        verdicts: dict[tuple[Any, ...], bool] | None = {} if server_checks(self) else None
        rows = self._index_rows(batch, after, joined, verdicts)
        memo: dict[tuple[Any, ...], Any] = {}
        implies, meets, props = index.implies, bound.meets, index.properties
        while True:
            chunk = list(islice(rows, batch))
            if not chunk:
                return
            entities = {}
            elsewhere = []
            for _key, row in chunk:
                entity = joined.pop(row[-1], None) if joined else None
                if entity is None:
                    elsewhere.append(row)
                elif entity is not REFUTED:
                    entities[row[-1]] = entity
            # Fetched by id and re-checked in Python (docs/design.md#re-check-on-the-server);
            # not an entity the scan joined for an earlier row of the chunk: the server's
            # verdicts were on that copy, and a newer one read now must not take them.
            wanted = [row[-1] for row in elsewhere if row[-1] not in entities]
            if wanted:
                entities.update(self.fetcher.fetch(wanted))
            for key, row in chunk:
                entity_id = row[-1]
                if entity_id in seen:
                    continue
                entity = entities.get(entity_id)
                if entity is None:
                    continue
                # The re-check: the entity implies the row (unless the server proved it, when
                # the body is not even decoded for it), and the row meets the conditions.
                verdict = verdicts.get(row) if verdicts else None
                if verdict is False or not meets(row):
                    continue
                properties = None
                if not verdict:
                    properties = entity.body_properties()
                    if not implies(properties, row, memo):
                        continue
                # An entity with list values has several rows, and its place is the first
                # one that matches. Within this call ``seen`` answers it once; a page after a
                # cursor skips it if that first row lies at or before the cursor (an earlier
                # page had it). Comparing with the cursor, not with this row, keeps an entity
                # a writer gave an earlier element while the scan ran: it is answered here,
                # not lost.
                seen.add(entity_id)
                # A row the server proved has no list among the index's properties.
                if after is not None and properties is not None:
                    earlier = False
                    for prop in props:
                        if type(properties.get(prop)) is list:
                            first = self._first_match_key(properties, entity_id)
                            earlier = first >= after if self.descending else first <= after
                            break
                    if earlier:
                        continue
                yield key, entity
            if verdicts:
                verdicts.clear()  # this chunk's; the next one's come with its rows

    def _first_match_key(self, properties: dict[str, Any], entity_id: bytes) -> tuple[Any, ...]:
        """The sort key of the entity's first row, in result order, that meets the conditions
        (the re-check passed, so there is one)."""
        bound = self.bound
        matching = [
            tuple((*row, entity_id)[p] for p in bound.sort_positions)
            for row in self.index.rows_for(properties)
            if bound.meets(row)
        ]
        return max(matching) if self.descending else min(matching)

    def _index_rows(
        self,
        batch: int,
        after: tuple[Any, ...] | None = None,
        joined: dict[bytes, Any] | None = None,
        verdicts: dict[tuple[Any, ...], bool] | None = None,
    ) -> Iterator[tuple[tuple[Any, ...], tuple[Any, ...]]]:
        """(sort key, row) pairs in result order, merged over the shards that can hold them."""
        index, bound = self.index, self.bound
        if bound.empty:
            return iter(())
        used = bucket_map.current()  # before the routing: the map its batches are confirmed by
        aliases = bound.target_aliases()
        if len(aliases) > 1:
            # Over several shards each returns up to a batch of rows for one merged batch:
            # joining bodies to rows the merge drops costs more than the round trip it saves.
            joined = None
        build = self.fetcher.model.row_builder() if joined is not None else None
        scans = [
            ShardScan(
                alias,
                index,
                bound.values,
                bound.sort_positions,
                self.descending,
                batch,
                joined,
                build,
                used if len(aliases) == 1 else None,
                None if verdicts is None else pinned_buckets(index, bound.values, used.buckets),
                verdicts,
            )
            for alias in aliases
        ]
        return merged(scans, after, self.descending)

    # --- cursor pagination ------------------------------------------------------------------

    @sync_only
    def page(self, after: str | None = None, size: int = 30) -> Page:
        """One page of ``size`` entities after an opaque ``cursor`` (None: the first page).

        Keyset pagination on the index order: entities inserted while a reader pages never
        cause duplicates or skip entities that existed when it started. The cursor is signed
        (``django.core.signing``); a tampered or foreign cursor raises :class:`InvalidCursor`.
        """
        if self.offset or self.limit is not None:
            raise InvalidQuery("page() works on an unsliced query; use size= for the page size")
        if not bounds.whole(size, 1, MAX_PAGE):
            raise InvalidQuery(f"page size must be an int from 1 to {MAX_PAGE}, not {size!r}")
        fingerprint = self._fingerprint()
        start = (
            None
            if after is None
            else cursors.decode(after, fingerprint, len(self.bound.sort_positions))
        )
        # Batches of size + 1 rows: one index read finds the page and whether another follows
        # (a batch of ``size`` would need a second read, and fetch, to learn that).
        sized = self._sliced(0, size + 1)
        found = retrying_stale(lambda: list(islice(sized._matching_keyed(start), size + 1)))
        has_next = len(found) > size
        entities = [entity for _key, entity in found[:size]]
        cursor = cursors.encode(fingerprint, found[size - 1][0]) if has_next else None
        return Page(entities=entities, next_cursor=cursor)

    def _fingerprint(self) -> str:
        return cursors.fingerprint(
            self.index.name, self.order, self.descending, self.bound.described()
        )
