"""The read path: DESIGN section 4.

``Entity.objects.filter_index(**conditions)`` builds an :class:`IndexQuery`. Evaluating it

1. picks the index that covers the conditions (:func:`choose_index`);
2. reads index rows, from the one shard that owns the ``shard_on`` value when the conditions pin
   it, else from every shard, merged in order; rows come in batches continued by keyset, so a
   limit is pushed down and nothing reads the whole table;
3. fetches the entities of a batch with one ``IN (...)`` query per entity shard;
4. keeps a row only if the entity exists, the row is one the entity's *current* properties
   imply, and the row's values meet every condition: a stale index row never yields an entity.

Conditions are ``property=value`` (``__exact``), ``__in``, ``__gt``, ``__gte``, ``__lt`` and
``__lte``, compared as the index column compares them (see :mod:`.keys`). A property holding a
list matches when one of its elements does.
"""

from __future__ import annotations

import hashlib
import heapq
import operator
import threading
import uuid
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice
from typing import Any

import msgpack
from django.conf import settings
from django.core import signing

from . import conf, keys, lifecycle, shards
from .exceptions import IndexValueError, InvalidCursor, InvalidQuery, NoIndexForQuery
from .indexes import Index, registry
from .lifecycle import maintained_indexes

CURSOR_SALT = "schemaless_store.query.cursor"
LOOKUPS = ("exact", "in", "gt", "gte", "lt", "lte")
RANGE_LOOKUPS = ("gt", "gte", "lt", "lte")
_SQL_OP = {"exact": "=", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
# The same comparisons in Python (column value, condition's column value): the re-check.
_CHECKS: dict[str, Callable[[Any, Any], bool]] = {
    "exact": operator.eq,
    "gt": operator.gt,
    "gte": operator.ge,
    "lt": operator.lt,
    "lte": operator.le,
    "in": lambda value, targets: value in targets,
}


_ENTITY: Any = None


def _entity_model() -> Any:
    global _ENTITY
    if _ENTITY is None:
        from .models import Entity

        _ENTITY = Entity
    return _ENTITY


# --- fetching entities by id -----------------------------------------------------------------

ENTITY_COLUMNS = "added_id, id, updated, body"
# From this many ids over several shards, fetch_by_ids reads the shards at once (measured:
# 100 ids over 2 shards gain, a page of 30 loses to the thread hand-off on 2 cores).
PARALLEL_FETCH_MIN = 64
# A pinned index read joins the entities that live on its own shard (one IN query saved).
COLOCATED_READS = True
_SELECT_ONE = f"SELECT {ENTITY_COLUMNS} FROM entities WHERE id = %s"


def fetch_by_ids(ids: Iterable[bytes]) -> dict[bytes, Any]:
    """``{id bytes: Entity}`` for the ids that exist; one ``IN`` query per shard and batch.

    Many ids on several MySQL shards (at least :data:`PARALLEL_FETCH_MIN`, outside any
    transaction) are read on the scatter threads, one shard per thread, at once; fewer are read
    one shard after the other, where handing work to a thread costs more than it saves.
    """
    by_alias: dict[str, list[bytes]] = defaultdict(list)
    for entity_id in dict.fromkeys(ids):
        by_alias[shards.alias_for(entity_id)].append(entity_id)
    found: dict[bytes, Any] = {}
    if len(by_alias) > 1 and sum(map(len, by_alias.values())) >= PARALLEL_FETCH_MIN:
        conns = [shards.connection(alias) for alias in by_alias]
        if all(c.vendor == "mysql" and not c.in_atomic_block for c in conns):
            for part in _scatter_pool().map(_fetch_shard, by_alias.items()):
                found.update(part)
            return found
    for item in by_alias.items():
        found.update(_fetch_shard(item))
    return found


def _fetch_shard(item: tuple[str, list[bytes]]) -> dict[bytes, Any]:
    alias, alias_ids = item
    from_row = _entity_model().row_builder()
    convert = _datetime_converter(shards.connection(alias))
    batch = conf.get().fetch_batch
    found: dict[bytes, Any] = {}
    for start in range(0, len(alias_ids), batch):
        chunk = alias_ids[start : start + batch]
        marks = ", ".join(["%s"] * len(chunk))
        rows = shards.read(
            alias, f"SELECT {ENTITY_COLUMNS} FROM entities WHERE id IN ({marks})", chunk
        )
        for added_id, row_id, updated, body in rows:
            row_id = bytes(row_id)
            found[row_id] = from_row(alias, added_id, row_id, convert(updated), bytes(body))
    return found


def _datetime_converter(conn: Any) -> Any:
    """What turns the ``updated`` column into the model's value, as Django's backend would.

    On MySQL that is attaching the connection's time zone (``make_aware`` of a naive value,
    which is all ``convert_datetimefield_value`` does there); other backends use theirs.
    """
    if conn.vendor == "mysql":
        if not settings.USE_TZ:
            return lambda value: value
        zone = conn.timezone
        return lambda value: value if value is None else value.replace(tzinfo=zone)
    ops = conn.ops
    return lambda value: ops.convert_datetimefield_value(value, None, conn)


def get_one(entity_id: Any) -> Any | None:
    """The entity with this id, or None: one ``SELECT`` on its shard."""
    key = keys.entity_id_bytes(entity_id)
    alias = shards.alias_for(key)
    conn = shards.connection(alias)
    rows = shards.read(alias, _SELECT_ONE, (key,), conn)
    if not rows:
        return None
    added_id, _row_id, updated, body = rows[0]
    if conn.vendor == "mysql" and settings.USE_TZ and updated is not None:
        updated = updated.replace(tzinfo=conn.timezone)  # _datetime_converter's work, inline
    elif conn.vendor != "mysql":
        updated = _datetime_converter(conn)(updated)
    return (_ENTITY or _entity_model()).row_builder()(alias, added_id, key, updated, bytes(body))


def get_many(ids: Iterable[Any]) -> dict[uuid.UUID, Any]:
    # The caller's UUID objects are the result's keys where it gave UUIDs.
    wanted = {keys.entity_id_bytes(i): i if type(i) is uuid.UUID else None for i in ids}
    found = fetch_by_ids(wanted)
    return {key or uuid.UUID(bytes=i): found[i] for i, key in wanted.items() if i in found}


class AllEntities:
    """Every entity, shard after shard, in ``added_id`` order within a shard."""

    def __init__(self, chunk_size: int = 500) -> None:
        self.chunk_size = chunk_size

    def __iter__(self) -> Iterator[Any]:
        Entity = _entity_model()
        for alias in shards.shard_aliases():
            with shards.errors_named(alias):
                yield from (
                    Entity.objects.using(alias).order_by("added_id").iterator(self.chunk_size)
                )

    def count(self) -> int:
        Entity = _entity_model()
        total = 0
        for alias in shards.shard_aliases():
            with shards.errors_named(alias):
                total += Entity.objects.using(alias).count()
        return total


# --- conditions and the choice of index ------------------------------------------------------


@dataclass(frozen=True)
class Condition:
    prop: str
    lookup: str
    value: Any


def parse_conditions(conditions: dict[str, Any]) -> list[Condition]:
    if not conditions:
        raise InvalidQuery("filter_index() needs at least one condition")
    parsed = []
    for key, value in conditions.items():
        prop, _, lookup = key.partition("__")
        lookup = lookup or "exact"
        if lookup not in LOOKUPS:
            raise InvalidQuery(
                f"unknown lookup {lookup!r} in {key!r}; lookups: {', '.join(LOOKUPS)}"
            )
        if lookup == "in":
            if isinstance(value, str | bytes) or not isinstance(value, Iterable):
                raise InvalidQuery(f"{key} takes a list of values, not {type(value).__name__}")
            value = list(value)
        parsed.append(Condition(prop, lookup, value))
    return parsed


def _plan_for(
    index: Index, conditions: list[Condition], order: str | None
) -> tuple[int, ...] | None:
    """A sort key for how well ``index`` serves the query (higher is better), or None.

    Every index that serves a query has the same equality columns: each property with only
    ``exact``/``in`` conditions must be in its equality prefix (were it not, it would be the next
    property, and so in the prefix), and a property with a range cannot be. So the number of
    equality (and of ``exact``) columns never separates two candidates, and the key does not
    count them: it prefers a pinned shard (one shard read instead of all), then fewer columns.
    """
    by_prop: dict[str, list[Condition]] = defaultdict(list)
    for cond in conditions:
        by_prop[cond.prop].append(cond)
    if not set(by_prop) <= set(index.properties):
        return None
    eq_prefix = 0
    for prop in index.properties:
        if prop in by_prop and all(c.lookup in ("exact", "in") for c in by_prop[prop]):
            eq_prefix += 1
        else:
            break
    rest = index.properties[eq_prefix:]
    leftover = [p for p in rest if p in by_prop]
    if len(leftover) > 1 or (leftover and leftover[0] != rest[0]):
        return None  # a condition the index cannot seek to
    # The order may be the next property, or one of the equality prefix (an ``in`` list is
    # scanned in the order of its values; an ``exact`` one orders nothing, harmlessly).
    if order is not None and order not in index.properties[:eq_prefix] + rest[:1]:
        return None
    pinned = any(c.prop == index.shard_on and c.lookup == "exact" for c in conditions)
    return (int(pinned), -len(index.properties))


def choose_index(
    conditions: list[Condition],
    order: str | None = None,
    allow_building: bool = False,
    column: str | None = None,
) -> Index:
    """The index for a query: among those that serve it, one whose ``shard_on`` value an exact
    condition pins (one shard read), then the fewest properties, then the table name that
    sorts first. (Every index that serves a query has the same equality columns: see
    :func:`_plan_for`.)

    Only ``ready`` indexes are used; if only a ``building`` one covers the query,
    :class:`IndexNotReady` says so (unless ``allow_building``).
    """
    candidates = []
    for index in maintained_indexes():
        if index.column != column:
            continue
        score = _plan_for(index, conditions, order)
        if score is not None:
            candidates.append((score, index.name, index))
    if not candidates:
        names = sorted({c.prop for c in conditions})
        declared = "; ".join(
            f"{i.name} ({', '.join(i.properties)}, shard_on={i.shard_on})"
            for i in registry.valid()
            if i.column == column
        )
        wanted = f"properties {names}" + (f" ordered by {order!r}" if order else "")
        if column is not None:
            wanted += f" of cell column {column!r}"
        raise NoIndexForQuery(
            f"no index covers {wanted}; declared indexes: {declared or 'none'}. An index serves "
            "equality on a prefix of its properties, then a range or ordering on the next one."
        )
    candidates.sort(key=lambda c: c[1])  # then stable: equal plans stay in name order
    candidates.sort(key=lambda c: c[0], reverse=True)
    if allow_building:
        return candidates[0][2]
    states = lifecycle.states()
    ready = [c for c in candidates if states.get(c[1]) == lifecycle.READY]
    if not ready:
        lifecycle.require_ready(candidates[0][2])  # re-reads the states, raises if not ready
        return candidates[0][2]
    return ready[0][2]


# --- the query -------------------------------------------------------------------------------


class IndexQuery:
    """A lazy query over one index. Iterate it, slice it, or call ``first``/``count``/``ids``."""

    def __init__(
        self, conditions: dict[str, Any], order: str | None = None, column: str | None = None
    ) -> None:
        self._raw = dict(conditions)
        # None: a query over entities; a name: over the latest versions of that cell column.
        self.column = column
        self.conditions = parse_conditions(conditions)
        self.order = order
        self.descending = False
        self.offset = 0
        self.limit: int | None = None
        self.building_ok = False
        self._index: Index | None = None
        self._cache: list[Any] | None = None

    # --- building ---------------------------------------------------------------------------

    def _clone(self, replan: bool = False) -> IndexQuery:
        """A copy without results; ``replan`` when the index may change (ordering, states)."""
        clone = IndexQuery.__new__(IndexQuery)
        clone.__dict__.update(self.__dict__)
        clone._cache = None
        if replan:
            clone._index = None
            clone.__dict__.pop("_conds", None)
            clone.__dict__.pop("_placed", None)
        return clone

    def order_by(self, field: str) -> IndexQuery:
        """Order by an indexed property: ``"published"`` or ``"-published"``."""
        if not isinstance(field, str) or not field.lstrip("-"):
            raise InvalidQuery(f"order_by() takes a property name, not {field!r}")
        clone = self._clone(replan=True)
        clone.descending = field.startswith("-")
        clone.order = field.lstrip("-")
        clone.index  # noqa: B018 - fail now, not at evaluation, when no index serves it
        return clone

    def allow_building(self) -> IndexQuery:
        """Accept an index that is still being backfilled (results may miss older entities)."""
        clone = self._clone(replan=True)
        clone.building_ok = True
        return clone

    def __getitem__(self, item: int | slice) -> Any:
        if isinstance(item, int):
            if item < 0:
                raise InvalidQuery("negative indexing is not supported")
            results = list(self[item : item + 1])
            if not results:
                raise IndexError("query index out of range")
            return results[0]
        if not isinstance(item, slice) or (item.step not in (None, 1)):
            raise InvalidQuery("slices take start and stop only")
        start, stop = item.start or 0, item.stop
        if start < 0 or (stop is not None and stop < 0):
            raise InvalidQuery("negative slice bounds are not supported")
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

    @property
    def index(self) -> Index:
        if self._index is None:
            self._index = choose_index(self.conditions, self.order, self.building_ok, self.column)
        return self._index

    # --- evaluating -------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        if self._cache is None:
            self._cache = list(self._results())
        return iter(self._cache)

    def __repr__(self) -> str:
        return f"<IndexQuery {self._raw!r} on {self.index.name}>"

    def first(self) -> Any | None:
        return next(iter(self[:1]), None)

    def exists(self) -> bool:
        return self.first() is not None

    def count(self) -> int:
        """The number of matching entities (after the re-check, so it reads every match)."""
        if self._cache is not None:
            return len(self._cache)
        return sum(1 for _ in self._results())

    def ids(self) -> list[uuid.UUID]:
        """Entity ids from the index rows alone: no entity is fetched, nothing is re-checked,
        so a stale row can show up here (use it for prefetching, not for answers)."""
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
            return 500
        # The refill loop reads further rows when stale ones are dropped: no over-fetch needed.
        # (1001: a page of the largest size, 1000, reads its size + 1 rows at once.)
        return max(1, min(1001, self.offset + self.limit))

    def _results(self) -> Iterator[Any]:
        if self.limit == 0:
            return
        stop = None if self.limit is None else self.offset + self.limit
        yield from islice(self._matching(), self.offset, stop)

    def _matching(self) -> Iterator[Any]:
        for _key, entity in self._matching_keyed():
            yield entity

    def _matching_keyed(self, after: tuple[Any, ...] | None = None) -> Iterator[tuple[Any, Any]]:
        """(sort key of the row, entity) for every match, in order, after the ``after`` key."""
        index = self.index
        batch = self._batch_size()
        seen: set[bytes] = set()
        # Measured (bench.whatif no_colocated): the join pays for a page (a slice), and costs
        # more than it saves when iterating every match in batches of 500.
        colocated: dict[bytes, Any] | None = (
            {} if COLOCATED_READS and self.limit is not None and self.column is None else None
        )
        rows = self._index_rows(batch, after, colocated)
        while True:
            chunk = list(islice(rows, batch))
            if not chunk:
                return
            entities = {}
            elsewhere = []
            for _key, row in chunk:
                entity = colocated.pop(row[-1], None) if colocated else None
                if entity is None:
                    elsewhere.append(row[-1])
                else:
                    entities[row[-1]] = entity
            if elsewhere:
                if self.column is None:
                    entities.update(fetch_by_ids(elsewhere))
                else:
                    from .cells import latest_by_keys

                    entities.update(latest_by_keys(elsewhere, self.column))
            memo = self.__dict__.setdefault("_memo", {})
            implies, meets = index.implies, self._row_meets_conditions
            props = index.properties
            for key, row in chunk:
                entity_id = row[-1]
                if entity_id in seen:
                    continue
                entity = entities.get(entity_id)
                if entity is None:
                    continue
                properties = entity.body_properties()
                # The re-check (_row_is_current), spelled out: it runs once per candidate.
                if not (implies(properties, row, memo) and meets(index, row)):
                    continue
                # An entity with list values has several rows, and its place is the first
                # one that matches. Within this call ``seen`` answers it once; a page after a
                # cursor skips it if that first row lies at or before the cursor (an earlier
                # page had it). Comparing with the cursor, not with this row, keeps an entity
                # a writer gave an earlier element while the scan ran: it is answered here,
                # not lost. (A plain loop: a generator per candidate cost 2-3% of a page.)
                # Either way the entity is decided for this call: ``seen`` skips its other rows.
                seen.add(entity_id)
                if after is not None:
                    earlier = False
                    for prop in props:
                        if type(properties.get(prop)) is list:
                            first = self._first_match_key(index, properties, entity_id)
                            earlier = first >= after if self.descending else first <= after
                            break
                    if earlier:
                        continue
                yield key, entity

    def _first_match_key(
        self, index: Index, properties: dict[str, Any], entity_id: bytes
    ) -> tuple[Any, ...]:
        """The sort key of the entity's first row, in result order, that meets the conditions
        (the re-check passed, so there is one)."""
        positions = self._sort_columns(index)
        matching = [
            tuple((*row, entity_id)[p] for p in positions)
            for row in index.rows_for(properties)
            if self._row_meets_conditions(index, row)
        ]
        return max(matching) if self.descending else min(matching)

    # --- cursor pagination ------------------------------------------------------------------

    def page(self, after: str | None = None, size: int = 30) -> Page:
        """One page of ``size`` entities after an opaque ``cursor`` (None: the first page).

        Keyset pagination on the index order: entities inserted while a reader pages never
        cause duplicates or skip entities that existed when it started. The cursor is signed
        (``django.core.signing``); a tampered or foreign cursor raises :class:`InvalidCursor`.
        """
        if self.offset or self.limit is not None:
            raise InvalidQuery("page() works on an unsliced query; use size= for the page size")
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= 1000:
            raise InvalidQuery(f"page size must be an int from 1 to 1000, not {size!r}")
        start = None if after is None else self._decode_cursor(after)
        # Batches of size + 1 rows: one index read finds the page and whether another follows
        # (a batch of ``size`` would need a second read, and fetch, to learn that).
        sized = self[: size + 1]
        found = list(islice(sized._matching_keyed(start), size + 1))
        has_next = len(found) > size
        entities = [entity for _key, entity in found[:size]]
        cursor = self._encode_cursor(found[size - 1][0]) if has_next else None
        return Page(entities=entities, next_cursor=cursor)

    def _fingerprint(self) -> str:
        index = self.index
        described = sorted(
            (prop, lookup, repr(value)) for prop, lookup, value in self._column_conditions(index)
        )
        text = repr((index.name, self.order, self.descending, described))
        return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()

    def _encode_cursor(self, key: tuple[Any, ...]) -> str:
        return signing.dumps(
            [self._fingerprint(), list(key)],
            salt=CURSOR_SALT,
            serializer=_CursorSerializer,
            compress=True,
        )

    def _decode_cursor(self, cursor: str) -> tuple[Any, ...]:
        if not isinstance(cursor, str):
            raise InvalidCursor(f"a cursor is a string, not {type(cursor).__name__}")
        try:
            payload = signing.loads(cursor, salt=CURSOR_SALT, serializer=_CursorSerializer)
        except (signing.BadSignature, ValueError, TypeError, zlib.error) as exc:
            raise InvalidCursor("the cursor is invalid or was tampered with") from exc
        if not (isinstance(payload, list) and len(payload) == 2 and isinstance(payload[1], list)):
            raise InvalidCursor("the cursor is invalid or was tampered with")
        fingerprint, key = payload
        if fingerprint != self._fingerprint():
            raise InvalidCursor("the cursor belongs to another query")
        # Signed, so written by this store; still, a key of the wrong shape (an old release, a
        # leaked secret) is refused here rather than failing in the driver.
        if not (
            len(key) == len(self._sort_columns(self.index))
            and all(type(v) in _CURSOR_TYPES for v in key)
            and all(-(2**63) <= v < 2**63 for v in key if type(v) is int)
            and all(v == v for v in key if type(v) is float)  # no NaN
            and type(key[-1]) is bytes
            and len(key[-1]) == 16
        ):
            raise InvalidCursor("the cursor is invalid or was tampered with")
        return tuple(key)

    def _row_is_current(self, index: Index, row: tuple[Any, ...], entity: Any) -> bool:
        """The re-check: the entity implies the row, and the row meets the conditions."""
        memo = self.__dict__.setdefault("_memo", {})
        return index.implies(entity.body_properties(), row, memo) and self._row_meets_conditions(
            index, row
        )

    # --- SQL on index tables ----------------------------------------------------------------

    def _column_conditions(self, index: Index) -> list[tuple[str, str, Any]]:
        """The conditions with values converted to the index's column values (memoized)."""
        cached = self.__dict__.get("_conds")
        if cached is not None and cached[0] is index:
            return cached[1]
        out = []
        for cond in self.conditions:
            try:
                if cond.lookup == "in":
                    value = [index.column_value(cond.prop, v) for v in cond.value]
                else:
                    value = index.column_value(cond.prop, cond.value)
            except IndexValueError as exc:
                raise InvalidQuery(f"{cond.prop}__{cond.lookup}: {exc}") from None
            out.append((cond.prop, cond.lookup, value))
        self._conds = (index, out)
        return out

    def _row_meets_conditions(self, index: Index, values: tuple[Any, ...]) -> bool:
        cached = self.__dict__.get("_placed")
        if cached is None or cached[0] is not index:
            position = {p: n for n, p in enumerate(index.properties)}
            placed = [
                (position[p], _CHECKS[lookup], frozenset(t) if lookup == "in" else t)
                for p, lookup, t in self._column_conditions(index)
            ]
            cached = self._placed = (index, placed)
        for n, check, target in cached[1]:  # noqa: SIM110 - all() of a generator is slower
            if not check(values[n], target):
                return False
        return True

    def _sort_columns(self, index: Index) -> list[int]:
        """Positions (in the row, entity_id last) that order the results."""
        fixed = {c.prop for c in self.conditions if c.lookup == "exact"}
        positions = []
        if self.order is not None:
            positions.append(index.properties.index(self.order))
        for n, prop in enumerate(index.properties):
            if prop not in fixed and n not in positions:
                positions.append(n)
        positions.append(len(index.properties))
        return positions

    def _target_aliases(self, index: Index, conds: list[tuple[str, str, Any]]) -> list[str]:
        for prop, lookup, value in conds:
            if prop == index.shard_on and lookup == "exact":
                return [shards.alias_for(index.routing_key(value))]
            if prop == index.shard_on and lookup == "in":
                return sorted({shards.alias_for(index.routing_key(v)) for v in value})
        return list(shards.shard_aliases())

    def _index_rows(
        self,
        batch: int,
        after: tuple[Any, ...] | None = None,
        colocated: dict[bytes, Any] | None = None,
    ) -> Iterator[tuple[tuple[Any, ...], tuple[Any, ...]]]:
        """(sort key, row) pairs in result order, merged over the shards that can hold them.

        Several shards are read concurrently (their first batches at once, in threads); each
        shard returns at most ``batch`` rows per query, so the work follows the page size.
        With ``colocated`` and one shard to read, its index read also brings the entities that
        live on that same shard (a ``LEFT JOIN`` on ``entities``), put there by id: their
        ``IN`` query is saved.
        """
        index = self.index
        conds = self._column_conditions(index)
        if any(lookup == "in" and not value for _p, lookup, value in conds):
            return iter(())
        aliases = self._target_aliases(index, conds)
        if len(aliases) > 1:
            # Over several shards each returns up to a batch of rows for one merged batch:
            # joining bodies to rows the merge drops costs more than the round trip it saves.
            colocated = None
        sort_positions = self._sort_columns(index)
        scans = [
            _ShardScan(alias, index, conds, sort_positions, self.descending, batch, colocated)
            for alias in aliases
        ]
        if len(scans) == 1:
            return scans[0].rows(after)
        first_batches = list(_scatter_pool().map(lambda scan: scan.fetch(after), scans))
        streams = [
            scan.rows(after, first) for scan, first in zip(scans, first_batches, strict=True)
        ]
        return heapq.merge(*streams, key=lambda pair: pair[0], reverse=self.descending)


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


# What index column values are (keys.ColumnType.to_db): a cursor's key holds nothing else.
_CURSOR_TYPES = frozenset((bytes, int, float))


class _CursorSerializer:
    """Cursors carry bytes (index keys), which JSON cannot: MessagePack instead."""

    def dumps(self, obj: Any) -> bytes:
        return msgpack.packb(obj, use_bin_type=True)

    def loads(self, data: bytes) -> Any:
        try:
            return msgpack.unpackb(data, raw=False)
        except Exception as exc:  # msgpack raises several types for damaged input
            raise ValueError(str(exc)) from exc


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _scatter_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="schemaless-scatter")
        return _pool


def reset_scatter_pool() -> None:
    """Stop the scatter threads (their connections go with them); a new pool starts on demand."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.shutdown(wait=True)


class _ShardScan:
    """Index rows of one shard in sort order, batch by batch, continued by keyset."""

    def __init__(
        self,
        alias: str,
        index: Index,
        conds: list[tuple[str, str, Any]],
        sort_positions: list[int],
        descending: bool,
        batch: int,
        colocated: dict[bytes, Any] | None = None,
    ) -> None:
        self.alias, self.sort_positions, self.descending, self.batch = (
            alias,
            sort_positions,
            descending,
            batch,
        )
        self.colocated = colocated
        conn = shards.connection(alias)
        self.convert = _datetime_converter(conn)
        self.select, self.where, self.order_sql, self.sort_columns = _scan_sql(
            conn.vendor, conn.ops.quote_name, index, conds, sort_positions, descending, colocated
        )
        self.width = len(index.properties) + 1
        self.params: list[Any] = []
        for _prop, lookup, value in conds:
            if lookup == "in":
                self.params.extend(value)
            else:
                self.params.append(value)

    def fetch(self, last: tuple[Any, ...] | None) -> list[tuple[Any, ...]]:
        """One batch of rows after the ``last`` sort key (runs on any thread)."""
        clauses, args = list(self.where), list(self.params)
        if last is not None:
            after_sql, after_args = _keyset_after(self.sort_columns, last, self.descending)
            clauses.append(after_sql)
            args.extend(after_args)
        sql = (
            self.select
            + (f" WHERE {' AND '.join(clauses)}" if clauses else "")
            + f" ORDER BY {self.order_sql} LIMIT {int(self.batch)}"
        )
        width = self.width
        found = shards.read(self.alias, sql, args)
        if found and any(isinstance(v, bytearray | memoryview) for v in found[0][:width]):
            rows = [  # a driver that hands out binary columns as buffers: the store uses bytes
                tuple(bytes(v) if isinstance(v, bytearray | memoryview) else v for v in raw[:width])
                for raw in found
            ]
        else:
            rows = [raw[:width] for raw in found]
        if self.colocated is not None:
            self._keep_colocated(rows, found)
        return rows

    def _keep_colocated(self, rows: list[tuple[Any, ...]], found: list[Any]) -> None:
        """Entities of the joined rows, built as ``fetch_by_ids`` builds them, by id; only
        those this shard owns (a copy left on another shard by a bucket move never counts)."""
        alias, width, colocated = self.alias, self.width, self.colocated
        build = _entity_model().row_builder()
        convert = self.convert
        alias_for = shards.alias_for
        for row, raw in zip(rows, found, strict=True):
            added_id, updated, body = raw[width:]
            entity_id = row[-1]
            if added_id is not None and alias_for(entity_id) == alias:
                colocated[entity_id] = build(
                    alias, added_id, entity_id, convert(updated), bytes(body)
                )

    def rows(
        self, after: tuple[Any, ...] | None, first: list[tuple[Any, ...]] | None = None
    ) -> Iterator[tuple[tuple[Any, ...], tuple[Any, ...]]]:
        fetched = self.fetch(after) if first is None else first
        while True:
            key = after
            for row in fetched:
                key = tuple(row[p] for p in self.sort_positions)
                yield key, row
            if len(fetched) < self.batch:
                return
            after = key
            fetched = self.fetch(after)


# (backend, index, condition shape, sort, direction, join) -> the scan's SQL pieces.
_SCAN_SQL: dict[tuple[Any, ...], tuple[str, tuple[str, ...], str, list[str]]] = {}
_SCAN_SQL_MAX = 512  # IN lists of many lengths make many shapes: start over past this


def _scan_sql(
    vendor: str,
    quote: Callable[[str], str],
    index: Index,
    conds: list[tuple[str, str, Any]],
    sort_positions: list[int],
    descending: bool,
    colocated: dict[bytes, Any] | None,
) -> tuple[str, tuple[str, ...], str, list[str]]:
    """``(SELECT ... FROM ..., WHERE clauses, ORDER BY columns, sort columns)`` of an index
    scan, built once per shape of query (the values are parameters)."""
    shape = tuple((p, lookup, len(v) if lookup == "in" else 0) for p, lookup, v in conds)
    key = (
        vendor,
        index.name,
        index.properties,
        shape,
        tuple(sort_positions),
        descending,
        colocated is not None,
    )
    cached = _SCAN_SQL.get(key)
    if cached is not None:
        return cached
    columns = [*index.properties, "entity_id"]

    def col(name: str) -> str:
        return f"i.{quote(name)}"

    where = []
    for prop, lookup, count in shape:
        if lookup == "in":
            where.append(f"{col(prop)} IN ({', '.join(['%s'] * count)})")
        else:
            where.append(f"{col(prop)} {_SQL_OP[lookup]} %s")
    direction = " DESC" if descending else ""
    order_sql = ", ".join(f"{col(columns[p])}{direction}" for p in sort_positions)
    sort_columns = [col(columns[p]) for p in sort_positions]
    selected = ", ".join(col(c) for c in columns)
    table = f"{quote(index.name)} i"
    if colocated is not None:
        # The entities on this shard come along (NULLs for the others): one round trip.
        selected += ", e.added_id, e.updated, e.body"
        table += f" LEFT JOIN entities e ON e.id = {col('entity_id')}"
    built = (f"SELECT {selected} FROM {table}", tuple(where), order_sql, sort_columns)
    if len(_SCAN_SQL) >= _SCAN_SQL_MAX:
        _SCAN_SQL.clear()
    _SCAN_SQL[key] = built
    return built


def _keyset_after(
    columns: list[str], last: tuple[Any, ...], descending: bool
) -> tuple[str, list[Any]]:
    """``(c1, c2, ...) > (v1, v2, ...)`` spelled out so every backend can seek with it."""
    op = "<" if descending else ">"
    ors, args = [], []
    for n in range(len(columns)):
        parts = [f"{columns[m]} = %s" for m in range(n)] + [f"{columns[n]} {op} %s"]
        ors.append("(" + " AND ".join(parts) + ")")
        args.extend(last[: n + 1])
    return "(" + " OR ".join(ors) + ")", args
