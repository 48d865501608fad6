"""Reading index rows for a query: one shard's rows in sort order, batch by batch, continued
by keyset; or several shards' at once (their first batches concurrently), merged in order."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter
from typing import Any

from ..config.indexes import Index
from ..sql.values import datetime_converter, plain_row
from ..tables import buckets, scans
from ..topology import bucket_map, replicas, shards
from ..values.bucket_hash import bucket_of
from .pool import scatter

# (sort key, row): a row is the index's column values, then the entity id.
KeyedRow = tuple[tuple[Any, ...], tuple[Any, ...]]
# In ``joined``: an entity of this shard that the server proved implies none of its rows read
# so far (nothing was built, and nothing need be fetched).
REFUTED: Any = object()


class ShardScan:
    """Index rows of one shard in sort order, batch by batch, continued by keyset.

    With ``joined`` (a dict, and a ``build`` for entities), each batch also brings the entities
    that live on that same shard (a ``LEFT JOIN``), put in ``joined`` by id: their ``IN``
    query is saved. After a batch of which fewer than 90% of the entities came along (they are not
    co-located with the index, docs/placement.md), the following batches read rows only.

    With ``checked`` as well (the buckets the scan reads: a pinned scan, re-checked on the
    server, :mod:`..tables.rechecks`), the server also says of each joined entity whether it
    implies its row, and leaves out the rows whose entity (in one of those buckets) does not;
    ``verdicts`` gets the server's word on each row of an entity this shard owns (True: proven,
    False: refuted), which the query then need not check in Python.
    """

    def __init__(
        self,
        alias: str,
        index: Index,
        conds: Sequence[tuple[str, str, Any]],
        sort_positions: Sequence[int],
        descending: bool,
        batch: int,
        joined: dict[bytes, Any] | None = None,
        build: Callable[..., Any] | None = None,
        used: bucket_map.BucketMap | None = None,
        checked: Sequence[int] | None = None,
        verdicts: dict[tuple[Any, ...], bool] | None = None,
    ) -> None:
        self.alias = alias
        # The map that routed a pinned scan here: each batch is confirmed against it (a scan of
        # every shard needs no confirmation: it reads the rows of a moved bucket wherever they
        # are, and each entity is fetched from its owner).
        self.used = used
        self.sort_positions = list(sort_positions)
        self.descending = descending
        self.batch = batch
        self.joined = joined
        self.build = build
        # A replica or the primary (replicas.reader): chosen here, in the querying thread.
        self.source = replicas.reader(alias)
        conn = shards.connection(alias)
        self.convert = datetime_converter(conn)
        self.shape = (conn.vendor, conn.ops.quote_name, index, conds, sort_positions, descending)
        self.width = len(index.properties) + 1
        self.conds_params: list[Any] = []
        for _prop, lookup, value in conds:
            if lookup == "in":
                self.conds_params.extend(value)
            else:
                self.conds_params.append(value)
        self.verdicts = verdicts
        self.checked = list(checked or ()) if joined is not None and verdicts is not None else []
        self.sql = scans.scan_sql(*self.shape, joined is not None, len(self.checked))
        self.params = self.conds_params
        if self.sql.having:
            total = (used or bucket_map.current()).buckets
            self.params = [*self.sql.select_params, total, *self.checked, *self.conds_params]

    def fetch(self, last: tuple[Any, ...] | None) -> list[tuple[Any, ...]]:
        """One batch of rows after the ``last`` sort key (runs on any thread)."""
        found = replicas.read_with_fallback(
            self.alias,
            self.source,
            lambda where: scans.read_batch(
                where, self.sql, self.params, last, self.descending, self.batch
            ),
        )
        if self.used is not None:
            buckets.confirm_read(self.alias, self.used)
        width = self.width
        if not found:
            rows = found
        elif any(isinstance(v, bytearray | memoryview) for v in found[0][:width]):
            # A driver that hands out binary columns as buffers: the store uses bytes.
            rows = [plain_row(raw[:width]) for raw in found]
        elif len(found[0]) > width:  # the joined entity's columns follow the row's
            rows = [raw[:width] for raw in found]
        else:
            rows = found
        if self.joined is not None and self._keep_joined(rows, found) * 10 < len(rows) * 9:
            self.joined = None  # mostly elsewhere: the join costs more than it saves
            self.sql = scans.scan_sql(*self.shape, False)
            self.params = self.conds_params
        return rows

    def _keep_joined(self, rows: list[tuple[Any, ...]], found: list[Any]) -> int:
        """Entities of the joined rows, built as fetches build them, by id; only those this
        shard owns (a copy left on another shard by a bucket move never counts). How many."""
        alias, width, joined, build = self.alias, self.width, self.joined, self.build
        assert joined is not None and build is not None
        convert = self.convert
        used = bucket_map.current()
        owners, total = used.owners, used.buckets
        verdicts = self.verdicts if self.sql.having else None
        kept = 0
        for row, raw in zip(rows, found, strict=True):
            added_id, updated, body = raw[width : width + 3]
            entity_id = row[-1]
            if added_id is not None and owners[bucket_of(entity_id, total)] == alias:
                kept += 1
                if verdicts is not None:
                    verdict = raw[width + 3]
                    if verdict is not None:
                        verdicts[tuple(row)] = bool(verdict)
                        if not verdict:
                            joined.setdefault(entity_id, REFUTED)
                            continue
                joined[entity_id] = build(alias, added_id, entity_id, convert(updated), bytes(body))
        return kept

    def rows(
        self, after: tuple[Any, ...] | None, first: list[tuple[Any, ...]] | None = None
    ) -> Iterator[KeyedRow]:
        fetched = self.fetch(after) if first is None else first
        positions = self.sort_positions
        # itemgetter of several positions gives their tuple; of one, the value alone.
        pick = itemgetter(*positions)
        single = len(positions) == 1
        while True:
            key = after
            for row in fetched:
                key = (pick(row),) if single else pick(row)
                yield key, row
            if len(fetched) < self.batch:
                return
            after = key
            fetched = self.fetch(after)


def merged(
    scans_: list[ShardScan], after: tuple[Any, ...] | None, descending: bool
) -> Iterator[KeyedRow]:
    """The rows of every scan in one order: one scan's as they come; several shards' first
    batches read at once (:func:`.pool.scatter`), then merged (k-way)."""
    if len(scans_) == 1:
        return scans_[0].rows(after)
    first_batches = scatter(lambda scan: scan.fetch(after), scans_)
    streams = [scan.rows(after, first) for scan, first in zip(scans_, first_batches, strict=True)]
    return heapq.merge(*streams, key=lambda pair: pair[0], reverse=descending)
